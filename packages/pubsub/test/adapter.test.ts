import { randomUUID } from 'node:crypto';
import { type AddressInfo, createServer } from 'node:net';
import type { CreateSubscriptionOptions, PubSub } from '@google-cloud/pubsub';
import { Consumer, type ConsumerEvent, createConsumer, isOncelyError, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { PostgresStore } from '@oncely/postgres';
import { createAdapter, diagnose, publishWithId } from '@oncely/pubsub';
import { Latch, waitFor } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClient, DATABASE_URL, PROJECT, postgresAvailable, startEmulator } from './support.js';

// The adapter's options, diagnose(), publishWithId and createConsumer loading the package
// by broker type, with the real client on the in-process emulator.

const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

const unique = (label: string) => `${label}-${randomUUID().slice(0, 8)}`;
const log = silentLogger;

/** The parts of the adapter's (private) SettlementClient the batching tests read. */
interface SettlementClientInternals {
  ack(ackId: string, retryUntil: () => number): Promise<void>;
  batches: Map<string, { items: unknown[] }>;
  inFlight: Set<Promise<void>>;
}

describe('broker options', () => {
  const fieldOf = (broker: Record<string, unknown>) => {
    try {
      createAdapter({ type: 'pubsub', ...broker }, { consumerName: 'c', log });
      return undefined;
    } catch (error) {
      expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
      return (error as { field?: string }).field;
    }
  };

  it('names the offending field', () => {
    expect(fieldOf({})).toBe('broker.subscription');
    expect(fieldOf({ subscription: 'ab' })).toBe('broker.subscription');
    expect(fieldOf({ subscription: 'payments', subscriptionName: 'x' })).toBe('broker.subscriptionName');
    expect(fieldOf({ subscription: 'payments', ackDeadlineSeconds: 601 })).toBe('broker.ackDeadlineSeconds');
    expect(fieldOf({ subscription: 'payments', maxStreams: 0 })).toBe('broker.maxStreams');
    expect(fieldOf({ subscription: 'payments', deadLetterTopic: 'goog' })).toBe('broker.deadLetterTopic');
    expect(fieldOf({ subscription: 'payments', connectTimeoutMs: 0 })).toBe('broker.connectTimeoutMs');
    expect(fieldOf({ subscription: 'payments', client: pubsub, projectId: 'p' })).toBe('broker.projectId');
    expect(fieldOf({ subscription: 'projects/p/subscriptions/payments', projectId: 'p' })).toBeUndefined();
  });
});

describe('diagnose()', () => {
  it('compares the dead-letter policy with maxAttempts and reports exactly-once', async () => {
    const [topic] = await pubsub.createTopic(unique('diag'));
    const [dead] = await pubsub.createTopic(unique('diag-dlq'));
    const [subscription] = await topic.createSubscription(unique('diag-sub'), {
      ackDeadlineSeconds: 10,
      enableExactlyOnceDelivery: true,
      deadLetterPolicy: { deadLetterTopic: dead.name, maxDeliveryAttempts: 5 },
    });
    const report = await diagnose({
      name: 'c',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: subscription.name,
      },
      store: undefined as never,
      handler: async () => {},
      maxAttempts: 5,
      handlerTimeoutMs: 30_000,
    });
    const text = (level: string) =>
      report.findings
        .filter((f) => f.level === level)
        .map((f) => f.message)
        .join('\n');
    expect(text('error')).toContain('maxDeliveryAttempts (5) must be above maxAttempts (5)');
    expect(text('ok')).toContain('exactly-once delivery is on');
    expect(text('ok')).toContain('the lease keeper extends it');
    expect(text('ok')).toContain(`published to ${dead.name}`);
  });

  it('reports a missing subscription and a lease shorter than the handler without renewal', async () => {
    const missing = await diagnose({
      name: 'c',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: unique('nope'),
      },
      store: undefined as never,
      handler: async () => {},
    });
    expect(missing.findings.map((f) => f.level)).toEqual(['error']);
    expect(missing.findings[0]!.message).toContain('does not exist');

    const [topic] = await pubsub.createTopic(unique('diag'));
    const [subscription] = await topic.createSubscription(unique('diag-sub'), { ackDeadlineSeconds: 10 });
    const report = await diagnose({
      name: 'c',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: subscription.name,
      },
      store: undefined as never,
      handler: async () => {},
      leaseRenewal: false,
      handlerTimeoutMs: 60_000,
    });
    const errors = report.findings.filter((f) => f.level === 'error').map((f) => f.message);
    expect(errors.join('\n')).toContain('leaseRenewal is off');
    expect(errors.join('\n')).toContain('no dead-letter topic');
    expect(report.findings.map((f) => f.message).join('\n')).toContain('exactly-once delivery is off');
  });

  // The adapter refuses a broker.maxExtensionMs below handlerTimeoutMs (a ConfigError at
  // construction), so `oncely doctor` must not call that configuration fine.
  it('reports a maxExtensionMs below handlerTimeoutMs as the error the consumer would refuse to start with', async () => {
    const report = await diagnose({
      name: 'c',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: 'payments',
        maxExtensionMs: 10_000,
      },
      store: undefined as never,
      handler: async () => {},
      handlerTimeoutMs: 60_000,
    });
    expect(report.findings.map((f) => f.level)).toEqual(['error']);
    expect(report.findings[0]!.message).toContain('broker.maxExtensionMs');
  });
});

describe('publishWithId', () => {
  it('sets the message-id attribute and the ordering key', async () => {
    const [topic] = await pubsub.createTopic(unique('pub'));
    topic.setPublishOptions({ messageOrdering: true });
    const [subscription] = await topic.createSubscription(unique('pub-sub'), { enableMessageOrdering: true });
    const messageId = await publishWithId(topic, {
      id: 'order-42',
      body: { n: 42 },
      orderingKey: 'customer-7',
    });
    const held = emulator.inspectSubscription(subscription.name)!.messages;
    expect(held).toHaveLength(1);
    expect(held[0]!.messageId).toBe(messageId);
    expect(held[0]!.attributes['message-id']).toBe('order-42');
    expect(held[0]!.orderingKey).toBe('customer-7');
    expect(JSON.parse(held[0]!.data.toString())).toEqual({ n: 42 });
  });

  it('gives up after the last attempt with the service error', async () => {
    const topic = pubsub.topic(unique('missing'));
    const error = await publishWithId(topic, { id: 'x', body: {} }, { attempts: 2, backoffMs: 10 }).catch(
      (e) => e,
    );
    expect((error as { code?: number }).code).toBe(5);
  });
});

describe.skipIf(!hasPostgres)('createConsumer by broker type', () => {
  it('loads @oncely/pubsub for type "pubsub" and processes a message once, exactly-once on', async () => {
    const schema = `oncely_pubsub_adapter_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await pool.query(`CREATE TABLE "${schema}".effects (id text)`);
    const [topic] = await pubsub.createTopic(unique('e2e'));
    const [subscription] = await topic.createSubscription(unique('e2e-sub'), {
      ackDeadlineSeconds: 10,
      enableExactlyOnceDelivery: true,
    });
    const consumer = await createConsumer({
      name: 'e2e',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: subscription.name,
      },
      store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${schema}".effects (id) VALUES ($1)`, [message.id]);
      },
    });
    const processed = new Promise<ConsumerEvent>((resolve) => consumer.on('processed', resolve));
    await consumer.start();
    await publishWithId(topic, { id: 'e2e-1', body: { ok: true } });
    expect((await processed).messageId).toBe('e2e-1');
    await consumer.stop();
    expect(emulator.inspectSubscription(subscription.name)!.messages).toHaveLength(0);
    const { rows } = await pool.query(`SELECT id FROM "${schema}".effects`);
    expect(rows).toEqual([{ id: 'e2e-1' }]);
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    await pool.end();
    await store.close();
  });

  it('fails start() within connectTimeoutMs on an endpoint nobody answers, naming it', async () => {
    // A port nothing listens on: the client retries UNAVAILABLE for its own 60 s budget
    // unless start() bounds its first call.
    const closed = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const schema = `oncely_pubsub_unreachable_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    const consumer = await createConsumer({
      name: 'unreachable',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: `127.0.0.1:${closed}`,
        subscription: 'payments',
        connectTimeoutMs: 1500,
      },
      store,
      logger: silentLogger,
      handler: async () => {},
    });
    const error = await consumer.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    await store.transaction((tx) => tx.query(`DROP SCHEMA "${schema}" CASCADE`));
    await store.close();
    expect(isOncelyError(error, 'BROKER_UNREACHABLE')).toBe(true);
    expect((error as Error).message).toContain(
      `cannot connect to Pub/Sub at 127.0.0.1:${closed} (projects/${PROJECT}/subscriptions/payments)`,
    );
  }, 30_000);
});

describe.skipIf(!hasPostgres)('settlement batching', () => {
  /**
   * A migrated store and a new topic and subscription, with an adapter whose settlement
   * window no test waits out (120 s): an ack sent before it passed was sent for another
   * reason. `drop()` removes the store's schema and closes it.
   */
  async function windowFixture(label: string, subscriptionOptions: CreateSubscriptionOptions = {}) {
    const schema = `oncely_pubsub_${label.replaceAll('-', '_')}_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    const [topic] = await pubsub.createTopic(unique(label));
    if (subscriptionOptions.enableMessageOrdering) topic.setPublishOptions({ messageOrdering: true });
    const [subscription] = await topic.createSubscription(unique(`${label}-sub`), {
      ackDeadlineSeconds: 60,
      ...subscriptionOptions,
    });
    const broker = {
      type: 'pubsub' as const,
      projectId: PROJECT,
      apiEndpoint: emulator.address,
      subscription: subscription.name,
    };
    const adapter = createAdapter(broker, { consumerName: label, log, settlementWindowMs: 120_000 });
    const view = () => emulator.inspectSubscription(subscription.name)!;
    const drop = async () => {
      await store.transaction((tx) => tx.query(`DROP SCHEMA "${schema}" CASCADE`)).catch(() => {});
      await store.close();
    };
    return { store, topic, broker, adapter, view, drop };
  }

  // Under flow control (at most `concurrency` messages outstanding) the service sends no
  // more until acks arrive, so an ack that waits out its batch window holds the next
  // message back: on the emulator the consumer ran at 0.83× a hand-written loop with the
  // same 5 ms window, and at 2× it once the batch went as soon as nothing else could join.
  it('holds an ack while another delivery runs, and sends the batch once the last one asks, not after the window', async () => {
    const { store, topic, broker, adapter, view, drop } = await windowFixture('acks');
    const slowStarted = new Latch();
    const finishSlow = new Latch();
    const processed: string[] = [];
    const consumer = new Consumer(
      {
        name: 'acks',
        broker,
        store,
        logger: log,
        concurrency: 4,
        handler: async (message) => {
          if (message.id !== 'slow') return;
          slowStarted.open();
          await finishSlow.wait();
        },
      },
      adapter,
    );
    consumer.on('processed', (event) => processed.push(event.messageId!));
    // The adapter's settlement client (private): which acks were asked for, and what is
    // batched or on its way.
    const settlement = (adapter as unknown as { settlement: SettlementClientInternals }).settlement;
    const askedAcks: string[] = [];
    const ack = settlement.ack.bind(settlement);
    settlement.ack = (ackId, retryUntil) => {
      askedAcks.push(ackId);
      return ack(ackId, retryUntil);
    };
    const settlementState = () => ({
      batched: settlement.batches.get('ack')?.items.length ?? 0,
      sending: settlement.inFlight.size,
    });
    try {
      await consumer.start();
      await publishWithId(topic, { id: 'slow', body: {} });
      await slowStarted.wait();
      await publishWithId(topic, { id: 'fast', body: {} });
      await waitFor(() => processed.includes('fast'), { description: "'fast' processed" });
      // 'slow' still runs, so its ack may join 'fast's request: 'fast' stays out meanwhile.
      // Read from the adapter's settlement client once 'fast' asked for its ack (it was a
      // 300 ms pause, after which an ack sent at once might still be on the wire): the
      // adapter enqueues and decides to flush in one synchronous step, so an ack it sends at
      // once is no longer batched here.
      await waitFor(() => askedAcks.length === 1, { description: "'fast' asked for its ack" });
      expect(settlementState(), "'fast's ack while 'slow' runs").toEqual({ batched: 1, sending: 0 });
      expect(view().outstanding, "outstanding while 'slow' runs").toBe(2);
      finishSlow.open();
      await waitFor(() => view().messages.length === 0, {
        timeoutMs: 20_000,
        description: 'both acks at the service, long before the 120 s window',
      });
      expect(processed).toEqual(['fast', 'slow']);
    } finally {
      finishSlow.open();
      await consumer.stop();
      await drop();
    }
  });

  // With `batch`, the deliveries of the next batch wait in the core for it to fill, and it
  // fills only once more messages come, which they do only once the acks arrive: an ack
  // batch that waited for them waited out its window every time (on the emulator, half of
  // each cycle of the batch bench: 2.3× the hand-written loop instead of 3×).
  it('sends a committed batch its acks while the next batch waits to fill, not after the window', async () => {
    const { store, topic, broker, adapter, view, drop } = await windowFixture('batch-acks');
    const processed: string[] = [];
    const consumer = new Consumer(
      {
        name: 'batch-acks',
        broker,
        store,
        logger: log,
        concurrency: 8,
        // A partial batch that no test waits out either.
        batch: { size: 4, maxWaitMs: 60_000 },
        handler: async () => {},
      },
      adapter,
    );
    consumer.on('processed', (event) => processed.push(event.messageId!));
    try {
      // Five at once: four fill a batch, the fifth waits in the core for three more.
      for (const id of ['m1', 'm2', 'm3', 'm4', 'm5']) await publishWithId(topic, { id, body: {} });
      await consumer.start();
      await waitFor(() => processed.length === 4, { description: 'a batch of four processed' });
      await waitFor(() => view().messages.length === 1, {
        timeoutMs: 20_000,
        description: "the batch's acks at the service while the fifth message waits for its batch to fill",
      });
      expect(view().outstanding, 'the fifth, waiting for its batch').toBe(1);
      expect(processed).toHaveLength(4);
      // stop() runs the partial batch and still acks it.
      await consumer.stop();
      expect(processed).toHaveLength(5);
      expect(view().messages).toHaveLength(0);
    } finally {
      await consumer.stop();
      await drop();
    }
  });

  // stop() hands back what was received but never dispatched (ModifyAckDeadline 0) and
  // waits for the service's answer: those nacks must not wait out the window either.
  it('hands back the messages that never got a slot at once on stop, not after the window', async () => {
    const { store, topic, broker, adapter, view, drop } = await windowFixture('stop-nacks', {
      enableMessageOrdering: true,
    });
    const started = new Latch();
    const finish = new Latch();
    const consumer = new Consumer(
      {
        name: 'stop-nacks',
        broker,
        store,
        logger: log,
        concurrency: 2,
        handler: async () => {
          started.open();
          await finish.wait();
        },
      },
      adapter,
    );
    try {
      // One ordering key: both go out together, and the second waits in the adapter
      // until the first is done.
      await publishWithId(topic, { id: 'running', body: {}, orderingKey: 'k' });
      await publishWithId(topic, { id: 'waiting', body: {}, orderingKey: 'k' });
      await consumer.start();
      await started.wait();
      await waitFor(() => view().outstanding === 2, { description: 'both messages out' });
      const stopped = consumer.stop();
      // The nack of 'waiting' reaches the service while 'running' still runs.
      await waitFor(() => view().outstanding === 1, {
        timeoutMs: 20_000,
        description: "'waiting' handed back long before the 120 s window",
      });
      finish.open();
      await stopped;
      expect(view().messages.map((m) => m.state)).toEqual(['ready']);
    } finally {
      finish.open();
      await consumer.stop();
      await drop();
    }
  });
});
