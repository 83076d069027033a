import { randomUUID } from 'node:crypto';
import { ServiceBusClient } from '@azure/service-bus';
import { type ConsumerEventName, isOncelyError, type Message, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer, diagnose, sendWithId } from '../src/index.js';
import { FOLLOW_UP_WAIT_MS } from '../src/ServiceBusAdapter.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// Adapter behaviour the conformance suite does not pin down, on the emulator with the
// real @azure/service-bus client and the real PostgreSQL store: the default 'producer'
// ID strategy, delayed retries as scheduled copies under duplicate detection, the
// MaxDeliveryCount check, sessions, a broker restart, sendWithId and diagnose().

const hasPostgres = await postgresAvailable();
const suite = hasPostgres ? describe : describe.skip;

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;
let store: PostgresStore;
let pool: pg.Pool;
const schema = `oncely_sb_adapter_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
let passed = true;

suite('@oncely/servicebus on the emulator', () => {
  beforeAll(async () => {
    emulator = await startServiceBusEmulator({ port: 0 });
    client = new ServiceBusClient(emulator.connectionString);
    store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, attempt int, seq int)`);
  });

  afterAll(async () => {
    if (passed) await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    else console.warn(`[servicebus adapter test] keeping schema ${schema}`);
    await pool?.end();
    await store?.close();
    await client?.close();
    await emulator?.stop();
  });

  /** Runs `body`; a failure keeps the schema as evidence. */
  function track(body: () => Promise<void>): () => Promise<void> {
    return async () => {
      try {
        await body();
      } catch (error) {
        passed = false;
        throw error;
      }
    };
  }

  async function effects(messageId: string): Promise<Array<{ attempt: number; seq: number | null }>> {
    const { rows } = await pool.query(
      `SELECT attempt, seq FROM "${schema}".effects WHERE message_id = $1 ORDER BY ctid`,
      [messageId],
    );
    return rows;
  }

  /** Resolves on the first `name` event for `messageId` (an event spy, no sleeps). */
  function eventFor(
    consumer: { on(name: ConsumerEventName, fn: (e: { messageId?: string }) => void): unknown },
    name: ConsumerEventName,
    messageId: string,
  ): Promise<void> {
    return new Promise((resolve) => {
      consumer.on(name, (e) => {
        if (e.messageId === messageId) resolve();
      });
    });
  }

  it(
    "retry with delay on a duplicate-detection queue: the scheduled copy is not dropped and keeps the 'producer' ID",
    track(async () => {
      const queue = `retry-dedup-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, {
        LockDuration: 'PT5S',
        RequiresDuplicateDetection: true,
        DuplicateDetectionHistoryTimeWindow: 'PT5M',
      });
      const seen: Array<{ id: string; attempt: number; messageId: unknown }> = [];
      const consumer = createServiceBusConsumer({
        name: `retry-dedup-${randomUUID().slice(0, 8)}`,
        broker: { connectionString: emulator.connectionString, queueName: queue, maxWaitTimeMs: 300 },
        store,
        logger: silentLogger,
        maxAttempts: 5,
        backoff: { initialMs: 300, maxMs: 1000, jitter: 0 },
        handler: async (message: Message<{ n: number }>, ctx) => {
          seen.push({
            id: message.id,
            attempt: ctx.attempt,
            messageId: (message.raw as { messageId?: unknown }).messageId,
          });
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, attempt) VALUES ($1, $2)`, [
            message.id,
            ctx.attempt,
          ]);
          if (ctx.attempt < 3) throw new Error(`planned failure ${ctx.attempt}`);
        },
      });
      const processed = eventFor(consumer, 'processed', 'order-1');
      await consumer.start();
      await client.createSender(queue).sendMessages({ body: { n: 1 }, messageId: 'order-1' });
      await processed;
      await consumer.stop();
      // The Oncely ID stays 'order-1' on both copies; the copies have MessageIds of their
      // own, so duplicate detection (which saw 'order-1') kept them.
      expect(seen.map((s) => [s.id, s.attempt])).toEqual([
        ['order-1', 1],
        ['order-1', 2],
        ['order-1', 3],
      ]);
      expect(seen[1]!.messageId).not.toBe('order-1');
      expect(seen[2]!.messageId).not.toBe(seen[1]!.messageId);
      expect(await effects('order-1')).toEqual([{ attempt: 3, seq: null }]);
      expect(emulator.inspect(queue)).toMatchObject({ total: 0, deadLettered: 0 });
    }),
  );

  it(
    'the trap the copies avoid: a copy that reuses the MessageId inside the window is silently dropped',
    track(async () => {
      const queue = `trap-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, {
        RequiresDuplicateDetection: true,
        DuplicateDetectionHistoryTimeWindow: 'PT5M',
      });
      const sender = client.createSender(queue);
      await sender.sendMessages({ body: 'original', messageId: 'same-id' });
      const receiver = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
      const [original] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 });
      await sender.scheduleMessages({ body: 'copy', messageId: 'same-id' }, new Date(Date.now() + 10));
      await receiver.completeMessage(original!);
      expect(emulator.inspect(queue).total).toBe(0);
      await receiver.close();
      await sender.close();
    }),
  );

  it(
    'start() refuses a MaxDeliveryCount that is not above maxAttempts',
    track(async () => {
      const queue = `mdc-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { MaxDeliveryCount: 5 });
      const consumer = createServiceBusConsumer({
        name: 'mdc',
        broker: { connectionString: emulator.connectionString, queueName: queue, maxDeliveryCount: 5 },
        store,
        logger: silentLogger,
        maxAttempts: 5,
        handler: async () => {},
      });
      const error = await consumer.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
    }),
  );

  it(
    'start() fails on an entity that does not exist',
    track(async () => {
      const consumer = createServiceBusConsumer({
        name: 'missing',
        broker: {
          connectionString: emulator.connectionString,
          queueName: `missing-${randomUUID().slice(0, 8)}`,
        },
        store,
        logger: silentLogger,
        handler: async () => {},
      });
      const error = await consumer.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
    }),
  );

  it(
    'sessions: each session in order, several sessions at once, a retry keeps its place',
    track(async () => {
      const queue = `sessions-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { RequiresSession: true, LockDuration: 'PT5S' });
      const keys = ['s-a', 's-b', 's-c'];
      const ids: string[] = [];
      let inFlight = 0;
      let maxInFlight = 0;
      const consumer = createServiceBusConsumer({
        name: `sessions-${randomUUID().slice(0, 8)}`,
        broker: {
          connectionString: emulator.connectionString,
          queueName: queue,
          sessions: true,
          maxWaitTimeMs: 300,
        },
        store,
        logger: silentLogger,
        concurrency: 3,
        backoff: { initialMs: 100, maxMs: 200 },
        handler: async (message: Message<{ seq: number }>, ctx) => {
          inFlight++;
          maxInFlight = Math.max(maxInFlight, inFlight);
          try {
            await new Promise((resolve) => setTimeout(resolve, 20));
            await ctx.tx.query(
              `INSERT INTO "${schema}".effects (message_id, attempt, seq) VALUES ($1, $2, $3)`,
              [message.orderingKey, ctx.attempt, message.body.seq],
            );
            if (message.id === 's-b-2' && ctx.attempt === 1) throw new Error('planned failure mid-session');
          } finally {
            inFlight--;
          }
        },
      });
      const last = keys.map((key) => eventFor(consumer, 'processed', `${key}-5`));
      await consumer.start();
      const sender = client.createSender(queue);
      const messages = [];
      for (let seq = 0; seq < 6; seq++) {
        for (const key of keys) {
          ids.push(`${key}-${seq}`);
          messages.push({ body: { seq }, messageId: `${key}-${seq}`, sessionId: key });
        }
      }
      await sender.sendMessages(messages);
      await Promise.all(last);
      await consumer.stop();
      for (const key of keys) {
        expect((await effects(key)).map((row) => row.seq)).toEqual([0, 1, 2, 3, 4, 5]);
      }
      expect(maxInFlight).toBeGreaterThanOrEqual(2);
      expect(maxInFlight).toBeLessThanOrEqual(3);
      expect(emulator.inspect(queue).total).toBe(0);
    }),
  );

  // A session worker with nothing to do waits in accept-next-session, which the service
  // (and the emulator) hold open for the client's whole wait, about 60 s; the SDK's
  // abortSignal does not cancel an attach already sent. stop() used to wait that out.
  it(
    "stop() does not wait out an idle worker's accept-next-session",
    track(async () => {
      const queue = `idle-sessions-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { RequiresSession: true });
      const consumer = createServiceBusConsumer({
        name: `idle-sessions-${randomUUID().slice(0, 8)}`,
        broker: { connectionString: emulator.connectionString, queueName: queue, sessions: true },
        store,
        logger: silentLogger,
        concurrency: 2,
        handler: async () => {},
      });
      await consumer.start();
      await expect.poll(() => emulator.inspect(queue).waitingForSession, { timeout: 10_000 }).toBe(2);
      // Bounded by this test's timeout, far below the accept's 60 s wait.
      await consumer.stop();
      // The closed connection took the waiting accepts with it: no session is left locked
      // to a receiver nobody reads.
      await expect.poll(() => emulator.inspect(queue).waitingForSession).toBe(0);
    }),
    20_000,
  );

  it(
    'keeps consuming across a broker restart (state kept, connections dropped)',
    track(async () => {
      const queue = `restart-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { LockDuration: 'PT5S' });
      const consumer = createServiceBusConsumer({
        name: `restart-${randomUUID().slice(0, 8)}`,
        broker: {
          connectionString: emulator.connectionString,
          queueName: queue,
          maxWaitTimeMs: 300,
          clientOptions: {
            retryOptions: { maxRetries: 20, retryDelayInMs: 100, maxRetryDelayInMs: 500, timeoutInMs: 5000 },
          },
        },
        store,
        logger: silentLogger,
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
        },
      });
      const before = eventFor(consumer, 'processed', 'before-restart');
      const after = eventFor(consumer, 'processed', 'after-restart');
      await consumer.start();
      const sender = client.createSender(queue);
      await sender.sendMessages({ body: {}, messageId: 'before-restart' });
      await before;
      await emulator.restart({ downMs: 300 });
      await sendWithId(sender, { body: {}, messageId: 'after-restart' }, { attempts: 10 });
      await after;
      await consumer.stop();
      expect((await effects('before-restart')).length).toBe(1);
      expect((await effects('after-restart')).length).toBe(1);
    }),
  );

  it(
    'sendWithId sets a MessageId on each message and keeps the ones given',
    track(async () => {
      const queue = `send-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, {
        RequiresDuplicateDetection: true,
        DuplicateDetectionHistoryTimeWindow: 'PT1M',
      });
      const sender = client.createSender(queue);
      const ids = await sendWithId(sender, [{ body: 1, messageId: 'given' }, { body: 2 }]);
      expect(ids[0]).toBe('given');
      expect(ids[1]).toMatch(/^[0-9a-f-]{36}$/);
      // A producer retry with the same ID is the same message to duplicate detection.
      await sendWithId(sender, { body: 1, messageId: 'given' });
      expect(emulator.messages(queue).map((m) => m.message_id)).toEqual(ids);
      await sender.close();
    }),
  );

  it(
    'diagnose compares LockDuration with handlerTimeoutMs and MaxDeliveryCount with maxAttempts',
    track(async () => {
      const queue = `doctor-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue);
      const report = await diagnose({
        name: 'doctor',
        broker: {
          type: 'servicebus',
          connectionString: emulator.connectionString,
          queueName: queue,
          lockDurationMs: 10_000,
          maxDeliveryCount: 3,
        },
        store,
        handler: async () => {},
        maxAttempts: 5,
        handlerTimeoutMs: 30_000,
        leaseRenewal: false,
      });
      expect(report.broker).toBe('servicebus');
      const levels = report.findings.map((f) => `${f.level}: ${f.message.slice(0, 40)}`);
      expect(levels[0]).toMatch(/^ok: entity .* answers/);
      expect(
        report.findings.some((f) => f.level === 'error' && f.message.includes('leaseRenewal is off')),
      ).toBe(true);
      expect(
        report.findings.some((f) => f.level === 'error' && f.message.includes('MaxDeliveryCount (3')),
      ).toBe(true);
      const missing = await diagnose({
        name: 'doctor',
        broker: {
          type: 'servicebus',
          connectionString: emulator.connectionString,
          queueName: 'no-such-queue',
        },
        store,
        handler: async () => {},
      });
      expect(missing.findings.map((f) => f.level)).toEqual(['error']);
    }),
  );
  // Catches: asking for every free slot while the queue holds fewer messages. The SDK
  // then holds the first message that arrives for up to another second, waiting for the
  // rest of the count (its batching window), while the handler slots sit idle; a
  // trickle of messages, or the last ones of a backlog, each wait out that second.
  it(
    'asks for one message while the queue is idle, and after messages arrived waits only briefly for more',
    track(async () => {
      const queue = `flow-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, {});
      const calls: Array<{ max: number; waitMs: number | undefined; got: number }> = [];
      const recording = new ServiceBusClient(emulator.connectionString);
      const createReceiver = recording.createReceiver.bind(recording) as (
        ...args: unknown[]
      ) => ReturnType<ServiceBusClient['createReceiver']>;
      recording.createReceiver = ((...args: unknown[]) => {
        const receiver = createReceiver(...args);
        const receive = receiver.receiveMessages.bind(receiver);
        receiver.receiveMessages = async (max, options) => {
          const got = await receive(max, options);
          calls.push({ max, waitMs: options?.maxWaitTimeInMs, got: got.length });
          return got;
        };
        return receiver;
      }) as ServiceBusClient['createReceiver'];
      const processed = new Set<string>();
      let allProcessed!: () => void;
      const done = new Promise<void>((resolve) => {
        allProcessed = resolve;
      });
      const consumer = createServiceBusConsumer({
        name: `flow-${randomUUID().slice(0, 8)}`,
        broker: { client: recording, queueName: queue, maxWaitTimeMs: 200 },
        store,
        logger: silentLogger,
        concurrency: 8,
        handler: async () => {},
      });
      consumer.on('processed', (event) => {
        processed.add(event.messageId!);
        if (processed.size === 5) allProcessed();
      });
      try {
        await consumer.start();
        const sender = client.createSender(queue);
        await sender.sendMessages(
          Array.from({ length: 5 }, (_, i) => ({ body: { n: i }, messageId: `flow-${i}` })),
        );
        await sender.close();
        await done;
        // Every call that came back empty waited for one message only, with the long wait.
        const afterEmpty = calls.filter((_, i) => i === 0 || calls[i - 1]!.got === 0);
        expect(afterEmpty.length).toBeGreaterThan(0);
        for (const call of afterEmpty) expect(call).toMatchObject({ max: 1, waitMs: 200 });
        // Every call right after messages arrived asked for the free slots (more than one
        // here: 8 slots, at most 5 messages in flight) with the short wait.
        const followUps = calls.filter((_, i) => i > 0 && calls[i - 1]!.got > 0);
        expect(followUps.length).toBeGreaterThan(0);
        for (const call of followUps) {
          expect(call.waitMs).toBe(FOLLOW_UP_WAIT_MS);
          expect(call.max).toBeGreaterThan(1);
        }
      } finally {
        await consumer.stop();
        await recording.close();
      }
    }),
  );
  // Catches: a disposition gate per message instead of per receiver. rhea 3.0.5 writes
  // the dispositions settled in one pass as ranges of consecutive delivery ids and skips
  // the second of a run when it checks that a range shares one outcome: two dead-letters
  // settled in the same tick both carry the first one's reason and description.
  it(
    'dead-letters settled together on one receiver each keep their own description',
    track(async () => {
      const queue = `gate-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, {});
      // Three: an idle receiver asks for one message, then for the rest in one call, so
      // the last two are received, and dead-lettered, together.
      const bodies = ['first body is not json', 'second body is not json', 'third body is not json'];
      const sender = client.createSender(queue);
      await sender.sendMessages(
        bodies.map((text, i) => ({
          body: Buffer.from(text),
          contentType: 'application/octet-stream',
          messageId: `gate-${i}`,
        })),
      );
      await sender.close();
      const consumer = createServiceBusConsumer({
        name: `gate-${randomUUID().slice(0, 8)}`,
        broker: { connectionString: emulator.connectionString, queueName: queue, maxWaitTimeMs: 200 },
        store,
        logger: silentLogger,
        concurrency: 4,
        handler: async () => {},
      });
      const deadLettered = new Set<string>();
      let both!: () => void;
      const done = new Promise<void>((resolve) => {
        both = resolve;
      });
      consumer.on('deadLettered', (event) => {
        deadLettered.add(event.messageId!);
        if (deadLettered.size === bodies.length) both();
      });
      try {
        await consumer.start();
        await done;
      } finally {
        await consumer.stop();
      }
      const letters = emulator.messages(`${queue}/$DeadLetterQueue`);
      expect(letters).toHaveLength(bodies.length);
      for (const letter of letters) {
        // rhea's message objects carry the AMQP properties (message_id) at the top level.
        const id = String((letter as { message_id?: unknown }).message_id);
        const own = bodies[Number(id.replace('gate-', ''))]!;
        const description = String(letter.application_properties?.DeadLetterErrorDescription ?? '');
        expect(letter.application_properties?.DeadLetterReason).toBe('invalid-body');
        // The JSON parser quotes the start of the text it refused.
        expect(description, `description of the dead letter holding '${own}'`).toContain(own.slice(0, 10));
      }
    }),
  );
});
