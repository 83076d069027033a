import { createConsumer, type Logger, stderrLogger } from '@oncely/core';
import { type BrokerFaults, MemoryBroker, randomFaults } from '@oncely/memory';
import { requestCharge } from './chargeClient.js';
import { openDemoStore } from './demoStore.js';
import { FakePaymentProvider } from './FakePaymentProvider.js';
import { NAIVE_ACCOUNT, NaiveConsumer } from './NaiveConsumer.js';
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
  /**
   * Called every `progressIntervalMs` while the run lasts, and once more at the end with
   * `final: true` and the figures of the result's table.
   */
  onProgress?: (progress: DemoProgress) => void;
  /** Status lines (the embedded databases starting, and ready). */
  onStatus?: (line: string) => void;
  /** @default 2000 */
  progressIntervalMs?: number;
  /** Gives up waiting for the queues to drain after this long. @default 60 s + 20 ms per message */
  timeoutMs?: number;
  /** The Oncely consumer's logger. @default stderrLogger (warnings and errors) */
  logger?: Logger;
  /**
   * The consumers' store: a `mysql://` or `mariadb://` URL runs the Oncely consumer on
   * the MySQL store (@oncely/mysql) in a database of the run's own, dropped at the end.
   * @default embedded PostgreSQL (PGlite)
   */
  storeUrl?: string;
}

/** One consumer's figures in a progress snapshot: the same counters the final table shows. */
export interface ConsumerProgress {
  deliveries: number;
  duplicatesSkipped: number;
  /** Charges the provider made for this consumer so far. */
  charges: number;
}

/** A progress snapshot. */
export interface DemoProgress {
  elapsedMs: number;
  published: number;
  toPublish: number;
  orders: number;
  naive: ConsumerProgress;
  oncely: ConsumerProgress;
  /** The snapshot taken after both queues drained (its figures are the table's). */
  final: boolean;
}

/**
 * Where the deliveries beyond one per order came from. The four add up to
 * `deliveries - orders`. For Oncely each of them was skipped as a duplicate, or, when a
 * lease ran out mid-handler on a loaded machine, its run failed and the message came back.
 */
export interface DuplicateSources {
  /** Extra publishes of an order (the producer retried after a timeout). */
  producerRetries: number;
  /** Acks the broker lost: each message came back once its lease ran out. */
  lostAcks: number;
  /** Deliveries the broker handed out twice. */
  brokerDuplicates: number;
  /** Any other redelivery (a failed attempt retried, a lease that ran out mid-handler). */
  otherRedeliveries: number;
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
  /** Where its extra deliveries came from. */
  sources: DuplicateSources;
}

/** The outcome of a run. */
export interface DemoResult {
  orders: number;
  published: number;
  producerDuplicates: number;
  expectedTotalCents: number;
  naive: ConsumerTally;
  oncely: ConsumerTally & {
    /** Deliveries whose handler ran and committed: one per order. */
    processed: number;
    paymentRows: number;
    distinctPaymentOrders: number;
  };
  /** Both queues drained before the timeout. */
  drained: boolean;
  /** Oncely charged exactly the expected total and wrote one payment row per order. */
  ok: boolean;
  durationMs: number;
  /** The last progress snapshot (`final: true`): the same figures as the table. */
  progress: DemoProgress;
  /** Time the embedded databases took to start, in ms. */
  startupMs: number;
  /** Charges the provider answered from its stored response (a retried key) instead of charging. */
  providerReplays: number;
  seed: number;
  faults: { dropAckRate: number; duplicateDeliveryRate: number };
}

const NAIVE_QUEUE = 'payments.naive';
const ONCELY_QUEUE = 'payments.oncely';
const ONCELY_ACCOUNT = 'oncely';

/** The seeded faults, counted per queue as the broker applies them. */
function countedFaults(faults: BrokerFaults) {
  const counts = new Map<string, { lostAcks: number; brokerDuplicates: number }>(
    [NAIVE_QUEUE, ONCELY_QUEUE].map((queue) => [queue, { lostAcks: 0, brokerDuplicates: 0 }]),
  );
  const counted: BrokerFaults = {
    dropAck: (id, target) => {
      const hit = faults.dropAck?.(id, target) ?? false;
      if (hit) counts.get(target.queue)!.lostAcks++;
      return hit;
    },
    duplicateDelivery: (id, target) => {
      const hit = faults.duplicateDelivery?.(id, target) ?? false;
      if (hit) counts.get(target.queue)!.brokerDuplicates++;
      return hit;
    },
  };
  return { counted, counts: (queue: string) => ({ ...counts.get(queue)! }) };
}

/**
 * The classic at-least-once scenario, end to end on the embedded defaults (MemoryBroker
 * and PGlite): a producer publishes orders (some of them more than once) to two queues
 * with the same fault pattern — lost acks and duplicate deliveries. A naive consumer
 * charges on every delivery; the Oncely consumer records the payment through `ctx.tx`
 * and charges over HTTP with `idempotentFetch(ctx.idempotencyKey('charge'), ...)`. The
 * provider is a real HTTP server on `@oncely/http` with its own embedded database; each
 * consumer charges its own account there.
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
  const faults = countedFaults(
    randomFaults({ seed, dropAck: dropAckRate, duplicateDelivery: duplicateDeliveryRate }),
  );
  broker.faults = faults.counted;
  for (const queue of [NAIVE_QUEUE, ONCELY_QUEUE]) broker.createQueue(queue, { visibilityTimeoutMs });

  // Two embedded PostgreSQL instances (PGlite, WebAssembly): the consumers' store and the
  // provider's own ledger. Starting them is most of the demo's first seconds.
  const demoStore = await openDemoStore(options.storeUrl);
  const { store } = demoStore;
  options.onStatus?.(
    options.storeUrl === undefined
      ? "starting the embedded databases (PGlite: the consumers' store and the payment provider's)…"
      : `starting the databases (the consumers' store: ${demoStore.description}; the payment provider's: PGlite)…`,
  );
  const startingProvider = FakePaymentProvider.start();
  const migrating = demoStore.prepare();
  const [providerStart, storeStart] = await Promise.allSettled([startingProvider, migrating]);
  if (providerStart.status === 'rejected' || storeStart.status === 'rejected') {
    broker.close();
    await demoStore.close();
    if (providerStart.status === 'fulfilled') await providerStart.value.close();
    throw providerStart.status === 'rejected'
      ? providerStart.reason
      : (storeStart as PromiseRejectedResult).reason;
  }
  const provider = providerStart.value;
  const startupMs = Date.now() - started;
  options.onStatus?.(
    `databases ready in ${(startupMs / 1000).toFixed(1)} s; payment provider at ${provider.url}`,
  );
  let progressTimer: NodeJS.Timeout | undefined;
  const running: Array<{ stop(): Promise<void> }> = [];
  try {
    const naive = new NaiveConsumer(broker, NAIVE_QUEUE, provider.url, concurrency);
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
        const charge = await requestCharge(provider.url, message.body, {
          account: ONCELY_ACCOUNT,
          idempotencyKey: ctx.idempotencyKey('charge'),
          signal: ctx.signal,
        });
        await ctx.tx.query(demoStore.insertPayment, [orderId, amountCents, charge.id]);
      },
    });
    running.push(oncely);
    const tally = { received: 0, duplicates: 0, processed: 0 };
    oncely.on('received', () => tally.received++);
    oncely.on('duplicate', () => tally.duplicates++);
    oncely.on('processed', () => tally.processed++);

    let published = 0;
    const progress = (final = false): DemoProgress => ({
      elapsedMs: Date.now() - started,
      published,
      toPublish: stream.publishes.length,
      orders: messages,
      naive: {
        deliveries: naive.deliveries,
        duplicatesSkipped: 0,
        charges: provider.written(NAIVE_ACCOUNT).charges,
      },
      oncely: {
        deliveries: tally.received,
        duplicatesSkipped: tally.duplicates,
        charges: provider.written(ONCELY_ACCOUNT).charges,
      },
      final,
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
    clearInterval(progressTimer);
    const last = progress(true);
    options.onProgress?.(last);

    const counted = await demoStore.countPayments();
    const paymentRows = counted.rows;
    const distinctPaymentOrders = counted.orders;
    const drained = idle.every(Boolean);
    const sent = stream.publishes.length;
    const [naiveLedger, oncelyLedger] = await Promise.all([
      provider.ledger(NAIVE_ACCOUNT),
      provider.ledger(ONCELY_ACCOUNT),
    ]);
    const sources = (queue: string, deliveries: number): DuplicateSources => {
      const injected = faults.counts(queue);
      return {
        producerRetries: sent - messages,
        ...injected,
        otherRedeliveries: deliveries - sent - injected.lostAcks - injected.brokerDuplicates,
      };
    };
    const result: DemoResult = {
      orders: messages,
      published: sent,
      producerDuplicates: sent - messages,
      expectedTotalCents: stream.expectedTotalCents,
      naive: {
        sent,
        deliveries: naive.deliveries,
        duplicatesSkipped: 0,
        charges: naiveLedger.charges,
        totalChargedCents: naiveLedger.totalCents,
        sources: sources(NAIVE_QUEUE, naive.deliveries),
      },
      oncely: {
        sent,
        deliveries: tally.received,
        duplicatesSkipped: tally.duplicates,
        charges: oncelyLedger.charges,
        totalChargedCents: oncelyLedger.totalCents,
        sources: sources(ONCELY_QUEUE, tally.received),
        processed: tally.processed,
        paymentRows,
        distinctPaymentOrders,
      },
      drained,
      ok:
        drained &&
        oncelyLedger.totalCents === stream.expectedTotalCents &&
        oncelyLedger.charges === messages &&
        paymentRows === messages &&
        distinctPaymentOrders === messages,
      durationMs: Date.now() - started,
      progress: last,
      startupMs,
      providerReplays: provider.replays,
      seed,
      faults: { dropAckRate, duplicateDeliveryRate },
    };
    return result;
  } finally {
    clearInterval(progressTimer);
    // Both stops are idempotent: a no-op after a normal run, a clean shutdown after a failure.
    await Promise.allSettled(running.map((consumer) => consumer.stop()));
    broker.close();
    await Promise.all([demoStore.close(), provider.close()]);
  }
}
