import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import {
  type Consumer,
  type ConsumerEvent,
  type ConsumerEventName,
  createConsumer,
  isOncelyError,
  LeaseLostError,
  silentLogger,
} from '@oncely/core';
import {
  ATTEMPTS_HEADER,
  ChannelClosedError,
  createRabbitMqConsumer,
  DETAIL_HEADER,
  diagnose,
  publish,
  type RabbitMqBrokerOptions,
  type RabbitMqConsumerOptions,
  RabbitMqOperationError,
  REASON_HEADER,
} from '@oncely/rabbitmq';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  closeConnectionsServerSide,
  createTestStore,
  deleteTopology,
  latch,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// The RabbitMQ adapter driven by the real core pipeline, against the real broker and a
// real PostgreSQL store. Every effect is a row written through ctx.tx and counted in
// the database.
const available = await servicesAvailable();
const run = promisify(execFile);

type Body = { id?: string; n?: number };

describe.skipIf(!available)('RabbitMQ consumer (real RabbitMQ + PostgreSQL)', () => {
  let raw: RawBroker;
  let db: TestStore;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(async () => {
    await db?.cleanup();
    await raw?.close();
  });

  /** Events of one consumer, by name. */
  function recordEvents(consumer: Consumer<any>) {
    const names: ConsumerEventName[] = [
      'received',
      'processed',
      'duplicate',
      'failed',
      'retried',
      'deadLettered',
      'ackFailed',
      'leaseLost',
      'released',
    ];
    const events = new Map<ConsumerEventName, ConsumerEvent[]>(names.map((n) => [n, []]));
    for (const name of names) consumer.on(name, (event) => events.get(name)!.push(event));
    return (name: ConsumerEventName) => events.get(name)!;
  }

  function consumerFor(
    queue: string,
    options: Omit<Partial<RabbitMqConsumerOptions<Body>>, 'broker'> & {
      broker?: Partial<RabbitMqBrokerOptions>;
    } = {},
  ) {
    const { broker, ...rest } = options;
    const consumer = createRabbitMqConsumer<Body>({
      name: rest.name ?? `c-${queue}`,
      store: db.store,
      logger: silentLogger,
      concurrency: 4,
      maxAttempts: 3,
      backoff: { initialMs: 200, maxMs: 2000, jitter: 0 },
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
      ...rest,
      broker: {
        url: RABBITMQ_URL,
        queue,
        reconnect: { initialMs: 50, maxMs: 1000 },
        ...broker,
      },
    });
    cleanups.push(async () => {
      await consumer.stop();
    });
    return consumer;
  }

  function topologyCleanup(queue: string, delays: number[] = []) {
    cleanups.push(() => deleteTopology(raw, queue, delays));
  }

  it('processes each ID once with producer duplicates, acks duplicates at once, and bounds concurrency by prefetch', async () => {
    const queue = unique('happy');
    topologyCleanup(queue);
    let inFlight = 0;
    let maxInFlight = 0;
    const consumer = consumerFor(queue, {
      concurrency: 4,
      handler: async (message, ctx) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await new Promise((resolve) => setTimeout(resolve, 5));
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        inFlight--;
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    const ids = Array.from({ length: 60 }, (_, i) => `${queue}-${i}`);
    // Each of the first 20 IDs published three times: producer retries.
    const messages = [...ids, ...ids.slice(0, 20), ...ids.slice(0, 20)].map((id) => ({ id, body: { id } }));
    await raw.publish(queue, messages);
    await waitFor(
      () => events('processed').length + events('duplicate').length === messages.length,
      'every delivery settled',
    );
    expect(events('processed')).toHaveLength(60);
    expect(events('duplicate')).toHaveLength(40);
    expect(events('ackFailed')).toHaveLength(0);
    const effects = await db.effects();
    expect(ids.every((id) => effects.get(id) === 1)).toBe(true);
    expect(maxInFlight).toBeGreaterThanOrEqual(2);
    expect(maxInFlight).toBeLessThanOrEqual(4);
    await consumer.stop();
    expect(await raw.ready(queue)).toBe(0);
  });

  for (const queueType of ['classic', 'quorum'] as const) {
    it(`retries through the delay topology with backoff and counts attempts (${queueType} queue)`, async () => {
      const queue = unique(`retry_${queueType}`);
      topologyCleanup(queue, [200, 400, 500]);
      const attempts: Array<{ attempt: number; at: number; deliveryAttempt?: number }> = [];
      const consumer = consumerFor(queue, {
        maxAttempts: 5,
        broker: { queueType },
        handler: async (message, ctx) => {
          attempts.push({ attempt: ctx.attempt, at: Date.now(), deliveryAttempt: message.deliveryAttempt });
          await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
          if (ctx.attempt < 3) throw new Error(`fail ${ctx.attempt}`);
        },
      });
      const events = recordEvents(consumer);
      await consumer.start();
      await raw.publish(queue, [{ id: `${queue}-r`, body: {} }]);
      await waitFor(() => events('processed').length === 1, 'the third attempt to succeed');
      expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
      // Backoff 200 ms then 400 ms (jitter 0), rounded up to the delay ladder: never earlier.
      expect(attempts[1]!.at - attempts[0]!.at).toBeGreaterThanOrEqual(190);
      expect(attempts[2]!.at - attempts[1]!.at).toBeGreaterThanOrEqual(390);
      expect(events('retried').map((e) => e.delayMs)).toEqual([200, 400]);
      expect((await db.effects()).get(`${queue}-r`)).toBe(1);
      expect(events('ackFailed')).toHaveLength(0);
      await consumer.stop();
      expect(await raw.ready(queue)).toBe(0);
      // The retry copies waited in per-delay queues and left them.
      expect(await raw.ready(`${queue}.delay.200`)).toBe(0);
      expect(await raw.ready(`${queue}.delay.400`)).toBe(0);
    });

    it(`retry: 'requeue' redelivers at once and still counts the attempt (${queueType} queue)`, async () => {
      const queue = unique(`requeue_${queueType}`);
      topologyCleanup(queue);
      const attempts: number[] = [];
      const consumer = consumerFor(queue, {
        broker: { queueType, retry: 'requeue' },
        handler: async (message, ctx) => {
          attempts.push(ctx.attempt);
          await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
          if (ctx.attempt < 2) throw new Error('first attempt fails');
        },
      });
      const events = recordEvents(consumer);
      await consumer.start();
      await raw.publish(queue, [{ id: `${queue}-q`, body: {} }]);
      await waitFor(() => events('processed').length === 1, 'the retry to succeed');
      expect(attempts).toEqual([1, 2]);
      expect((await db.effects()).get(`${queue}-q`)).toBe(1);
      await consumer.stop();
      expect(await raw.ready(queue)).toBe(0);
    });
  }

  // Issue 11, RabbitMQ 4: a retry copy whose confirm came after confirmTimeoutMs was
  // treated as not sent: the original was requeued too, and the message then ran on two
  // lines (the copy and the original), each retrying on its own.
  it('a retry copy confirmed after the confirm timeout acks the original instead of requeueing it', async () => {
    const queue = unique('late_confirm');
    topologyCleanup(queue, [200]);
    const runs: number[] = [];
    const consumer = consumerFor(queue, {
      maxAttempts: 5,
      // Shorter than any persistent-message confirm on a durable queue.
      broker: { confirmTimeoutMs: 1, retryDelaysMs: [200] },
      handler: async (message, ctx) => {
        runs.push(ctx.attempt);
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        if (ctx.attempt < 2) throw new Error('first run fails');
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    await raw.publish(queue, [{ id: `${queue}-m`, body: {} }]);
    await waitFor(() => events('processed').length === 1, 'the retry to succeed', 20_000);
    // No 7 s sleep for the original to come back (it was requeued 5 s after a failed copy):
    // the broker says whether it was acked. stop() closes the channel, and RabbitMQ puts
    // every delivery still unacked on it back in the queue, so a held original shows up as
    // one ready message at once, whether or not its requeue timer had run.
    await consumer.stop();
    expect(await raw.ready(queue), 'the original, not acked after its copy was confirmed').toBe(0);
    expect(events('duplicate'), 'runs of the same message on a second line').toHaveLength(0);
    expect(runs).toEqual([1, 2]);
    expect((await db.effects()).get(`${queue}-m`)).toBe(1);
  });

  it('dead-letters poison messages with the reason in headers and leaves the rest of the stream alone', async () => {
    const queue = unique('poison');
    topologyCleanup(queue, [200, 400]);
    const consumer = consumerFor(queue, {
      maxAttempts: 2,
      handler: async (message, ctx) => {
        if (message.body.id === 'always-fails') throw new Error('handler always throws');
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    await raw.publish(queue, [
      { id: `${queue}-ok-1`, body: { id: 'fine' } },
      { body: { id: 'no-id' } },
      { id: `${queue}-bad-json`, rawBody: '{not json' },
      { id: `${queue}-throws`, body: { id: 'always-fails' } },
      { id: `${queue}-ok-2`, body: { id: 'fine' } },
    ]);
    await waitFor(() => events('deadLettered').length === 3, 'three dead letters');
    await waitFor(() => events('processed').length === 2, 'the healthy messages');
    await consumer.stop();
    const dead = await raw.drain(`${queue}.dlq`);
    const reasons = new Map(
      dead.map((m) => [
        m.properties.messageId ?? '(none)',
        {
          reason: String(m.properties.headers?.[REASON_HEADER]),
          detail: String(m.properties.headers?.[DETAIL_HEADER]),
          attempts: m.properties.headers?.[ATTEMPTS_HEADER],
        },
      ]),
    );
    expect(reasons.get('(none)')?.reason).toBe('missing-id');
    expect(reasons.get(`${queue}-bad-json`)?.reason).toBe('invalid-body');
    expect(reasons.get(`${queue}-throws`)?.reason).toBe('max-attempts');
    expect(reasons.get(`${queue}-throws`)?.detail).toContain('handler always throws');
    expect(reasons.get(`${queue}-throws`)?.attempts).toBe(2);
    // The original body travels with the dead letter.
    expect(dead.find((m) => m.properties.messageId === `${queue}-bad-json`)?.content.toString()).toBe(
      '{not json',
    );
    const effects = await db.effects();
    expect(effects.get(`${queue}-ok-1`)).toBe(1);
    expect(effects.get(`${queue}-ok-2`)).toBe(1);
    expect(effects.has(`${queue}-throws`)).toBe(false);
    expect(await raw.ready(queue)).toBe(0);
  });

  // Must catch: acking the original before its retry copy is confirmed. The copy cannot
  // be published here (its delay queue exists with other arguments, so the declare is
  // refused): the original must stay with the broker and come back, never be lost.
  // Checked red by acking before publishing in RabbitMqDelivery.publishThenAck.
  it('a retry copy the broker refuses leaves the original unacked; it is requeued and processed later', async () => {
    const queue = unique('copyfail');
    topologyCleanup(queue, [200]);
    const ch = await raw.freshChannel();
    await ch.assertQueue(`${queue}.delay.200`, { durable: true });
    await ch.close();
    let runs = 0;
    const consumer = consumerFor(queue, {
      handler: async (message, ctx) => {
        runs++;
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        if (runs === 1) throw new Error('first run fails');
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    await raw.publish(queue, [{ id: `${queue}-c`, body: {} }]);
    await waitFor(() => events('ackFailed').length === 1, 'the refused retry copy');
    expect(events('ackFailed')[0]!.error).toBeInstanceOf(RabbitMqOperationError);
    expect((events('ackFailed')[0]!.error as RabbitMqOperationError).replyCode).toBe(406);
    await waitFor(() => events('processed').length === 1, 'the requeued original to be processed', 20_000);
    expect(runs).toBe(2);
    expect((await db.effects()).get(`${queue}-c`)).toBe(1);
    await consumer.stop();
    expect(await raw.ready(queue)).toBe(0);
  });

  // Must catch: trusting a bare publisher confirm. RabbitMQ confirms a message no queue
  // was bound to receive (it is dropped); the dead letter is published mandatory and a
  // basic.return turns the confirm into a failure, so the original is kept and retried.
  it('a dead letter nobody can receive is not confirmed as sent; the original comes back and is dead-lettered once the route exists', async () => {
    const queue = unique('unroutable');
    // The original waits in the 5 s delay queue between tries (parked, not held).
    topologyCleanup(queue, [5000]);
    const consumer = consumerFor(queue);
    const events = recordEvents(consumer);
    await consumer.start();
    const ch = await raw.freshChannel();
    await ch.unbindQueue(`${queue}.dlq`, `${queue}.dlx`, queue);
    await raw.publish(queue, [{ body: { note: 'no id' } }]);
    await waitFor(() => events('ackFailed').length === 1, 'the unroutable dead letter');
    expect((events('ackFailed')[0]!.error as RabbitMqOperationError).replyCode).toBe(312);
    await ch.bindQueue(`${queue}.dlq`, `${queue}.dlx`, queue);
    await ch.close();
    await waitFor(
      () => events('deadLettered').length === 1,
      'the dead letter after the route is back',
      20_000,
    );
    await consumer.stop();
    const dead = await raw.drain(`${queue}.dlq`);
    expect(dead.map((m) => m.properties.headers?.[REASON_HEADER])).toEqual(['missing-id']);
    expect(await raw.ready(queue)).toBe(0);
  });

  // Issue 11, RabbitMQ 4 (requeueLater holding originals during a DLX outage): a dead
  // letter that cannot be published kept its original unacked for 5 s, then requeued it
  // to the head of the queue, where it failed again: with prefetch 1 the healthy messages
  // behind it never ran until the dead-letter route came back.
  it('during a dead-letter outage the messages behind a poison one still run', async () => {
    const queue = unique('dlx_outage');
    topologyCleanup(queue, [5000]);
    const handled: string[] = [];
    const consumer = consumerFor(queue, {
      concurrency: 1,
      broker: { prefetch: 1 },
      handler: async (message, ctx) => {
        handled.push(message.id);
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    const ch = await raw.freshChannel();
    await ch.unbindQueue(`${queue}.dlq`, `${queue}.dlx`, queue);
    await raw.publish(queue, [{ body: { note: 'no id' } }, { id: 'healthy-1' }, { id: 'healthy-2' }]);
    await waitFor(() => handled.length === 2, 'the healthy messages during the outage', 15_000);
    expect(events('deadLettered')).toHaveLength(0);
    await ch.bindQueue(`${queue}.dlq`, `${queue}.dlx`, queue);
    await ch.close();
    await waitFor(
      () => events('deadLettered').length === 1,
      'the dead letter after the route is back',
      20_000,
    );
    await consumer.stop();
    const dead = await raw.drain(`${queue}.dlq`);
    expect(dead.map((m) => m.properties.headers?.[REASON_HEADER])).toEqual(['missing-id']);
    expect(await raw.ready(queue)).toBe(0);
  });

  // Must catch: acking before commit, or trusting the delivery instead of the unique key.
  // The first handler is cut off mid-run by a server-side connection close; the message
  // comes back on the new channel; only one effect may exist.
  it('connection closed from the server side mid-handler: redelivery, one effect, the stale ack is reported and ctx.signal aborts', async () => {
    const queue = unique('killed');
    const connectionName = unique('oncely-test-killed');
    topologyCleanup(queue);
    const firstRunning = latch();
    const release = latch();
    let firstSignal: AbortSignal | undefined;
    let runs = 0;
    const consumer = consumerFor(queue, {
      concurrency: 2,
      broker: { connectionName },
      handler: async (message, ctx) => {
        runs++;
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        if (runs === 1) {
          firstSignal = ctx.signal;
          firstRunning.open();
          await release.promise;
        }
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    await raw.publish(queue, [{ id: `${queue}-k`, body: {} }]);
    await firstRunning.promise;
    expect(await closeConnectionsServerSide(connectionName)).toBe(1);
    // The lease keeper polls the delivering channel: the handler sees its signal abort.
    await waitFor(() => firstSignal?.aborted === true, 'ctx.signal to abort after the channel loss');
    expect(firstSignal?.reason).toBeInstanceOf(LeaseLostError);
    // The redelivery reaches the second slot and waits on the first handler's marker row.
    await waitFor(() => events('received').length === 2, 'the redelivery');
    release.open();
    await waitFor(() => events('duplicate').length === 1, 'the redelivery to be skipped as a duplicate');
    expect(events('processed')).toHaveLength(1);
    expect(events('ackFailed')).toHaveLength(1);
    expect(events('ackFailed')[0]!.error).toBeInstanceOf(ChannelClosedError);
    expect((await db.effects()).get(`${queue}-k`)).toBe(1);
    expect(runs).toBe(1);
    await consumer.stop();
    expect(await raw.ready(queue)).toBe(0);
  });

  it('a handler that gives up when the channel is lost rolls back; the redelivery applies the work once', async () => {
    const queue = unique('killed2');
    const connectionName = unique('oncely-test-killed2');
    topologyCleanup(queue);
    const firstRunning = latch();
    let runs = 0;
    const consumer = consumerFor(queue, {
      broker: { connectionName },
      handler: async (message, ctx) => {
        runs++;
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        if (runs === 1) {
          firstRunning.open();
          await new Promise((_resolve, reject) => {
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
          });
        }
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    await raw.publish(queue, [{ id: `${queue}-g`, body: {} }]);
    await firstRunning.promise;
    await closeConnectionsServerSide(connectionName);
    await waitFor(() => events('processed').length === 1, 'the redelivery to be processed');
    expect(runs).toBe(2);
    expect((await db.effects()).get(`${queue}-g`)).toBe(1);
    await consumer.stop();
    expect(await raw.ready(queue)).toBe(0);
  });

  it('competing consumers on one queue: one effect per ID', async () => {
    const queue = unique('compete');
    topologyCleanup(queue);
    const name = `c-${queue}`;
    const consumers = [1, 2, 3].map(() => consumerFor(queue, { name, concurrency: 3 }));
    const settled: string[] = [];
    const perConsumer = consumers.map(() => 0);
    consumers.forEach((consumer, i) => {
      for (const event of ['processed', 'duplicate'] as const) {
        consumer.on(event, (e) => {
          settled.push(e.messageId!);
          perConsumer[i]!++;
        });
      }
    });
    await Promise.all(consumers.map((c) => c.start()));
    const ids = Array.from({ length: 150 }, (_, i) => `${queue}-${i}`);
    const messages = [...ids, ...ids.slice(0, 75), ...ids.slice(50, 125)].map((id) => ({ id, body: {} }));
    await raw.publish(queue, messages);
    await waitFor(() => settled.length === messages.length, 'every delivery settled', 30_000);
    const effects = await db.effects();
    expect(ids.filter((id) => effects.get(id) !== 1)).toEqual([]);
    expect(await db.markerCount(name)).toBe(150);
    // All three took part.
    expect(perConsumer.every((n) => n > 0)).toBe(true);
    await Promise.all(consumers.map((c) => c.stop()));
    expect(await raw.ready(queue)).toBe(0);
  });

  it('graceful stop: in-flight handlers finish and are acked, prefetched deliveries are released at once, a restart redoes nothing', async () => {
    const queue = unique('stop');
    topologyCleanup(queue);
    const name = `c-${queue}`;
    const started = latch();
    const finish = latch();
    let running = 0;
    const consumer = consumerFor(queue, {
      name,
      concurrency: 2,
      broker: { prefetch: 10 },
      handler: async (message, ctx) => {
        running++;
        if (running === 2) started.open();
        await finish.promise;
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    });
    const events = recordEvents(consumer);
    await consumer.start();
    const ids = Array.from({ length: 20 }, (_, i) => `${queue}-${i}`);
    await raw.publish(
      queue,
      ids.map((id) => ({ id, body: {} })),
    );
    await started.promise;
    // Ten are prefetched: two run, eight wait in the adapter.
    const stopping = consumer.stop();
    // Released right away, before the handlers finish: 20 - 2 in flight back in the queue.
    await waitFor(async () => (await raw.ready(queue)) === 18, 'prefetched deliveries to be released');
    finish.open();
    await stopping;
    expect(events('processed')).toHaveLength(2);
    expect(events('ackFailed')).toHaveLength(0);
    // The effects table is shared by the whole file: count this queue's IDs only.
    const afterStop = await db.effects();
    const applied = ids.filter((id) => afterStop.has(id));
    expect(applied, 'effects of the two in-flight handlers after stop').toHaveLength(2);
    expect(
      applied.map((id) => afterStop.get(id)),
      'effect rows of each in-flight message',
    ).toEqual([1, 1]);
    expect(await raw.ready(queue)).toBe(18);

    const again = consumerFor(queue, { name, concurrency: 4 });
    const againEvents = recordEvents(again);
    await again.start();
    await waitFor(() => againEvents('processed').length === 18, 'the rest after a restart');
    expect(againEvents('duplicate')).toHaveLength(0);
    const effects = await db.effects();
    expect(ids.every((id) => effects.get(id) === 1)).toBe(true);
    await again.stop();
  });

  it('createConsumer loads the adapter by broker.type and consumes', async () => {
    const queue = unique('loaded');
    topologyCleanup(queue);
    const consumer = await createConsumer<Body>({
      name: `c-${queue}`,
      broker: { type: 'rabbitmq', url: RABBITMQ_URL, queue },
      store: db.store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    });
    cleanups.push(() => consumer.stop());
    const processed: string[] = [];
    consumer.on('processed', (e) => processed.push(e.messageId!));
    await consumer.start();
    await raw.publish(queue, [{ id: `${queue}-1`, body: {} }]);
    await waitFor(() => processed.length === 1, 'the message');
    expect(processed).toEqual([`${queue}-1`]);
  });

  it('takes the ID from a header or a function when configured', async () => {
    const queue = unique('ids');
    topologyCleanup(queue);
    const seen: string[] = [];
    const consumer = consumerFor(queue, {
      idStrategy: { attribute: 'x-order-id' },
      handler: async (message) => {
        seen.push(message.id);
      },
    });
    await consumer.start();
    await raw.publish(queue, [{ id: 'ignored', body: {}, headers: { 'x-order-id': 'order-7' } }]);
    await waitFor(() => seen.length === 1, 'the message');
    expect(seen).toEqual(['order-7']);
  });

  it('publish() resolves with the messageId once confirmed, refuses a message without one, and rejects a message no queue receives', async () => {
    const queue = unique('publish');
    topologyCleanup(queue);
    const seen: Array<{ id: string; body: unknown; viaFunction: string }> = [];
    const consumer = consumerFor(queue, {
      // One at a time, in queue order: whatever was published before 'order-2' (on the
      // same channel, so queued before it) has been handled once 'order-2' is.
      concurrency: 1,
      // An ID function of the envelope: here the producer's messageId with a prefix.
      idStrategy: (envelope) => (envelope.producerMessageId ? `fn:${envelope.producerMessageId}` : undefined),
      handler: async (message) => {
        seen.push({ id: message.id, body: message.body, viaFunction: message.id.slice(0, 3) });
      },
    });
    // A message sent without an ID would be dead-lettered (missing-id), never seen.
    const deadLettered: string[] = [];
    consumer.on('deadLettered', (event) => deadLettered.push(event.reason ?? 'dead-lettered'));
    await consumer.start();
    const channel = await raw.connection.createConfirmChannel();
    channel.on('error', () => {});
    try {
      const id = await publish(channel, { queue }, { id: 'x', n: 1 }, { messageId: 'order-1' });
      expect(id).toBe('order-1');
      // Issue 11: a publish without an ID used to get a random UUID, so a retried publish
      // was a new message the consumer could not catch. It is refused, nothing is sent.
      for (const options of [undefined, {}, { messageId: '' }]) {
        const missing = await publish(channel, { queue }, { id: 'y', n: 2 }, options as never).then(
          (id) => id,
          (e: unknown) => e,
        );
        expect(missing).toBeInstanceOf(RabbitMqOperationError);
        expect(String((missing as Error).message)).toMatch(/messageId/);
      }
      const second = await publish(channel, { queue }, { id: 'y', n: 2 }, { messageId: 'order-2' });
      expect(second).toBe('order-2');
      await waitFor(() => seen.some((s) => s.id === 'fn:order-2'), "'order-2' handled");
      expect(seen.map((s) => s.id)).toEqual(['fn:order-1', 'fn:order-2']);
      expect(deadLettered, 'refused publishes that reached the queue anyway').toEqual([]);
      expect(seen.find((s) => s.id === 'fn:order-1')?.body).toEqual({ id: 'x', n: 1 });
      const error = await publish(
        channel,
        { queue: unique('nobody-home') },
        {},
        { messageId: 'lost-1' },
      ).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(RabbitMqOperationError);
      expect((error as RabbitMqOperationError).replyCode).toBe(312);
    } finally {
      await channel.close().catch(() => {});
    }
  });

  // Issue 11, RabbitMQ 4: deliveryLimit <= maxAttempts was only reported by diagnose();
  // the broker then dead-letters (with no reason) before the consumer's own limit.
  it('refuses to start a quorum queue whose deliveryLimit is not above maxAttempts; warns above the quorum prefetch cap', async () => {
    const queue = unique('limit');
    topologyCleanup(queue);
    const consumer = consumerFor(queue, {
      maxAttempts: 3,
      broker: { queueType: 'quorum', deliveryLimit: 3 },
    });
    const error = await consumer.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isOncelyError(error, 'BROKER_MISCONFIGURED'), String(error)).toBe(true);
    expect(String((error as Error).message)).toMatch(/deliveryLimit 3 .*maxAttempts 3/);

    const warnings: string[] = [];
    const logger = { ...silentLogger, warn: (message: string) => warnings.push(message) };
    const cappedQueue = unique('limit');
    topologyCleanup(cappedQueue);
    const capped = consumerFor(cappedQueue, {
      maxAttempts: 3,
      logger,
      broker: { queueType: 'quorum', deliveryLimit: 10, prefetch: 2500 },
    });
    await capped.start();
    expect(
      warnings.some((w) => /prefetch 2500 .*2000/.test(w)),
      warnings.join('\n'),
    ).toBe(true);
  });

  it('options: exchange bindings, single active consumer, consumer priority and arguments, several URLs', async () => {
    const queue = unique('opts');
    const exchange = unique('opts_x');
    topologyCleanup(queue);
    cleanups.push(async () => {
      const ch = await raw.freshChannel();
      await ch.deleteExchange(exchange).catch(() => {});
      await ch.close().catch(() => {});
    });
    const seen: string[][] = [[], []];
    const make = (n: number) =>
      consumerFor(queue, {
        name: `c-${queue}`,
        concurrency: 1,
        handler: async (message) => {
          seen[n]!.push(message.id);
        },
        broker: {
          // A closed port first: the next URL is used.
          url: ['amqp://guest:guest@127.0.0.1:1', RABBITMQ_URL],
          bindings: [{ exchange, type: 'topic', routingKey: 'orders.*.created' }],
          singleActiveConsumer: true,
          consumerPriority: 5,
          consumeArguments: { 'x-oncely-test': 'yes' },
        },
      });
    const first = make(0);
    const second = make(1);
    await first.start();
    await second.start();
    const channel = await raw.connection.createConfirmChannel();
    channel.on('error', () => {});
    try {
      await publish(
        channel,
        { exchange, routingKey: 'orders.eu.created' },
        { n: 1 },
        { messageId: 'via-exchange-1' },
      );
      await publish(
        channel,
        { exchange, routingKey: 'orders.us.created' },
        { n: 2 },
        { messageId: 'via-exchange-2' },
      );
      // Not matching the binding: unroutable, refused by publish().
      await expect(
        publish(channel, { exchange, routingKey: 'orders.eu.deleted' }, {}, { messageId: 'not-bound' }),
      ).rejects.toBeInstanceOf(RabbitMqOperationError);
    } finally {
      await channel.close().catch(() => {});
    }
    await waitFor(() => seen[0]!.length + seen[1]!.length === 2, 'both messages');
    // Single active consumer: one consumer got everything.
    expect(seen.map((s) => s.length).sort()).toEqual([0, 2]);
    const ch = await raw.freshChannel();
    try {
      expect((await ch.checkQueue(queue)).consumerCount).toBe(2);
    } finally {
      await ch.close().catch(() => {});
    }
    const { stdout } = await run('rabbitmqctl', [
      '-q',
      'list_consumers',
      '--no-table-headers',
      'queue_name',
      'arguments',
    ]);
    const lines = stdout
      .split('\n')
      .filter((line) => line.startsWith(`${queue}\t`) || line.startsWith(`${queue} `));
    expect(lines).toHaveLength(2);
    for (const line of lines) expect(line).toMatch(/x-priority.*5/);
    for (const line of lines) expect(line).toMatch(/x-oncely-test/);
    const report = await diagnose({
      name: `c-${queue}`,
      broker: { type: 'rabbitmq', url: ['amqp://guest:guest@127.0.0.1:1', RABBITMQ_URL], queue },
      store: db.store,
      handler: async () => {},
    });
    expect(report.findings.some((f) => f.level === 'warn' && /1 of 2 URLs refused/.test(f.message))).toBe(
      true,
    );
    expect(report.findings.some((f) => /cannot connect/.test(f.message))).toBe(false);
  });

  // Must catch: a handler budget longer than the broker's delivery timeout going unnoticed
  // (the broker would close the channel mid-handler and redeliver forever).
  it('refuses to start when a handler can outlive consumer_timeout, and diagnose() reports it', async () => {
    const queue = unique('timeout');
    topologyCleanup(queue);
    const consumer = consumerFor(queue, {
      handlerTimeoutMs: 120_000,
      broker: { consumerTimeoutMs: 60_000 },
    });
    const error = await consumer.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
    expect((error as Error).message).toContain('consumer_timeout (60000 ms)');

    const report = await diagnose({
      name: 'diag',
      broker: { type: 'rabbitmq', url: RABBITMQ_URL, queue, consumerTimeoutMs: 60_000 },
      store: db.store,
      handlerTimeoutMs: 120_000,
      handler: async () => {},
    });
    expect(report.findings.filter((f) => f.level === 'error').map((f) => f.message)).toEqual([
      expect.stringContaining('handlerTimeoutMs (120000 ms) is not below consumer_timeout (60000 ms)'),
    ]);
    expect(
      report.findings.some((f) => f.level === 'ok' && f.message.startsWith('connected to RabbitMQ 3.')),
    ).toBe(true);
  });

  it('reports a queue declared with other arguments, and a missing queue when assertQueue is false', async () => {
    const queue = unique('mismatch');
    topologyCleanup(queue);
    const ch = await raw.freshChannel();
    await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'classic' } });
    await ch.close();
    const quorum = consumerFor(queue, { broker: { queueType: 'quorum' } });
    const mismatch = await quorum.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isOncelyError(mismatch, 'BROKER_MISCONFIGURED')).toBe(true);
    expect((mismatch as Error).message).toContain("broker.queueType ('quorum')");

    const missing = consumerFor(unique('missing'), { broker: { assertQueue: false, retry: 'requeue' } });
    const notFound = await missing.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isOncelyError(notFound, 'BROKER_MISCONFIGURED')).toBe(true);
    expect((notFound as Error).message).toContain('does not exist');
  });
});
