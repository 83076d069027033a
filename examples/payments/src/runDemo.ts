import { createConsumer, type Logger, stderrLogger } from '@oncely/core';
import { MemoryBroker, randomFaults } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { FakePaymentProvider } from './FakePaymentProvider.js';
import { NaiveConsumer } from './NaiveConsumer.js';
import { type Order, orderStream } from './orders.js';

/** Knobs of one demo run; every field has a default. */
export interface DemoOptions {
  /** Distinct orders. @default 1500 */
  messages?: number;
  /** Seeds the amounts, the producer's retries and the broker's faults. @default 42 */
  seed?: number;
  /** Handlers in flight per consumer. @default 8 */
  concurrency?: number;
  /** Share of acks the broker loses. @default 0.2 */
  dropAckRate?: number;
  /** Share of deliveries the broker hands out twice. @default 0.05 */
  duplicateDeliveryRate?: number;
  /** Share of orders the producer publishes 2–3 times. @default 0.1 */
  producerDuplicateShare?: number;
  /** Broker lease; a lost ack's message comes back after it. @default 500 */
  visibilityTimeoutMs?: number;
  /** Called every `progressIntervalMs` while the run lasts. */
  onProgress?: (progress: DemoProgress) => void;
  /** @default 2000 */
  progressIntervalMs?: number;
  /** Gives up waiting for the queues to drain after this long. @default 60 s + 20 ms per message */
  timeoutMs?: number;
  /** The Oncely consumer's logger. @default stderrLogger (warnings and errors) */
  logger?: Logger;
}

/** A progress snapshot. */
export interface DemoProgress {
  elapsedMs: number;
  published: number;
  toPublish: number;
  naiveDeliveries: number;
  oncelyDeliveries: number;
  oncelyProcessed: number;
  orders: number;
}

/** What one consumer did. */
export interface ConsumerTally {
  /** Messages published to its queue. */
  sent: number;
  /** Deliveries it received (redeliveries and duplicate copies included). */
  deliveries: number;
  /** Deliveries recognised as already processed and skipped. */
  duplicatesSkipped: number;
  /** Charges the provider made for it. */
  charges: number;
  totalChargedCents: number;
}

/** The outcome of a run. */
export interface DemoResult {
  orders: number;
  published: number;
  producerDuplicates: number;
  expectedTotalCents: number;
  naive: ConsumerTally;
  oncely: ConsumerTally & { paymentRows: number; distinctPaymentOrders: number };
  /** Both queues drained before the timeout. */
  drained: boolean;
  /** Oncely charged exactly the expected total and wrote one payment row per order. */
  ok: boolean;
  durationMs: number;
  seed: number;
  faults: { dropAckRate: number; duplicateDeliveryRate: number };
}

const NAIVE_QUEUE = 'payments.naive';
const ONCELY_QUEUE = 'payments.oncely';

/**
 * The classic at-least-once scenario, end to end on the embedded defaults (MemoryBroker
 * and PGlite): a producer publishes orders (some of them more than once) to two queues
 * with the same fault pattern — lost acks and duplicate deliveries. A naive consumer
 * charges on every delivery; the Oncely consumer records the payment through `ctx.tx`
 * and charges with `ctx.idempotencyKey('charge')`. Each has its own payment provider
 * ledger.
 *
 * @example
 * ```ts
 * const result = await runDemo({ messages: 500 });
 * console.log(result.oncely.totalChargedCents === result.expectedTotalCents); // true
 * ```
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const messages = options.messages ?? 1500;
  const seed = options.seed ?? 42;
  const concurrency = options.concurrency ?? 8;
  const dropAckRate = options.dropAckRate ?? 0.2;
  const duplicateDeliveryRate = options.duplicateDeliveryRate ?? 0.05;
  const visibilityTimeoutMs = options.visibilityTimeoutMs ?? 500;
  const timeoutMs = options.timeoutMs ?? 60_000 + 20 * messages;
  const started = Date.now();

  const stream = orderStream(messages, { seed, duplicateShare: options.producerDuplicateShare ?? 0.1 });
  const broker = new MemoryBroker();
  // Decisions depend on (seed, order ID, delivery count) only: both queues get the same pattern.
  broker.faults = randomFaults({ seed, dropAck: dropAckRate, duplicateDelivery: duplicateDeliveryRate });
  for (const queue of [NAIVE_QUEUE, ONCELY_QUEUE]) broker.createQueue(queue, { visibilityTimeoutMs });

  const naiveProvider = await FakePaymentProvider.start();
  const oncelyProvider = await FakePaymentProvider.start();
  const store = PostgresStore.embedded();
  let progressTimer: NodeJS.Timeout | undefined;
  const running: Array<{ stop(): Promise<void> }> = [];
  try {
    await store.migrate();
    await store.transaction((tx) =>
      // No unique key on order_id on purpose: only Oncely's processed marker stands between a redelivery and a second row.
      tx.query(`CREATE TABLE payments (
        id bigserial PRIMARY KEY,
        order_id text NOT NULL,
        amount_cents integer NOT NULL,
        charge_id text NOT NULL,
        paid_at timestamptz NOT NULL DEFAULT now()
      )`),
    );

    const naive = new NaiveConsumer(broker, NAIVE_QUEUE, naiveProvider, concurrency);
    running.push(naive);
    const oncely = await createConsumer<Order>({
      name: 'payments',
      broker: { type: 'memory', broker, queue: ONCELY_QUEUE, visibilityTimeoutMs },
      store,
      concurrency,
      logger: options.logger ?? stderrLogger,
      handler: async (message, ctx) => {
        const { orderId, amountCents } = message.body;
        // The provider keeps its own state: the key makes a retried charge return the first one.
        const charge = await oncelyProvider.charge(
          { orderId, amountCents, idempotencyKey: ctx.idempotencyKey('charge') },
          ctx.signal,
        );
        await ctx.tx.query('INSERT INTO payments (order_id, amount_cents, charge_id) VALUES ($1, $2, $3)', [
          orderId,
          amountCents,
          charge.id,
        ]);
      },
    });
    running.push(oncely);
    const tally = { received: 0, duplicates: 0, processed: 0 };
    oncely.on('received', () => tally.received++);
    oncely.on('duplicate', () => tally.duplicates++);
    oncely.on('processed', () => tally.processed++);

    let published = 0;
    const progress = (): DemoProgress => ({
      elapsedMs: Date.now() - started,
      published,
      toPublish: stream.publishes.length,
      naiveDeliveries: naive.deliveries,
      oncelyDeliveries: tally.received,
      oncelyProcessed: tally.processed,
      orders: messages,
    });
    if (options.onProgress) {
      const report = options.onProgress;
      progressTimer = setInterval(() => report(progress()), options.progressIntervalMs ?? 2000);
    }

    naive.start();
    await oncely.start();
    for (const order of stream.publishes) {
      // The same publish to both queues: one stream, two consumers side by side.
      await broker.send(NAIVE_QUEUE, { id: order.orderId, body: order });
      await broker.send(ONCELY_QUEUE, { id: order.orderId, body: order });
      published++;
      // Let the consumers run while the producer is still publishing.
      if (published % 50 === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    const idle = await Promise.all(
      [NAIVE_QUEUE, ONCELY_QUEUE].map((queue) => broker.waitForIdle(queue, { timeoutMs })),
    );
    await Promise.all([naive.stop(), oncely.stop()]);

    const { rows } = await store.transaction((tx) =>
      tx.query<{ rows: number; orders: number }>(
        'SELECT count(*)::int AS rows, count(DISTINCT order_id)::int AS orders FROM payments',
      ),
    );
    const paymentRows = rows[0]?.rows ?? 0;
    const distinctPaymentOrders = rows[0]?.orders ?? 0;
    const drained = idle.every(Boolean);
    const sent = stream.publishes.length;
    const result: DemoResult = {
      orders: messages,
      published: sent,
      producerDuplicates: sent - messages,
      expectedTotalCents: stream.expectedTotalCents,
      naive: {
        sent,
        deliveries: naive.deliveries,
        duplicatesSkipped: 0,
        charges: naiveProvider.chargeCount,
        totalChargedCents: naiveProvider.totalCents,
      },
      oncely: {
        sent,
        deliveries: tally.received,
        duplicatesSkipped: tally.duplicates,
        charges: oncelyProvider.chargeCount,
        totalChargedCents: oncelyProvider.totalCents,
        paymentRows,
        distinctPaymentOrders,
      },
      drained,
      ok:
        drained &&
        oncelyProvider.totalCents === stream.expectedTotalCents &&
        oncelyProvider.chargeCount === messages &&
        paymentRows === messages &&
        distinctPaymentOrders === messages,
      durationMs: Date.now() - started,
      seed,
      faults: { dropAckRate, duplicateDeliveryRate },
    };
    return result;
  } finally {
    clearInterval(progressTimer);
    // Both stops are idempotent: a no-op after a normal run, a clean shutdown after a failure.
    await Promise.allSettled(running.map((consumer) => consumer.stop()));
    broker.close();
    await store.close();
    await Promise.all([naiveProvider.close(), oncelyProvider.close()]);
  }
}
