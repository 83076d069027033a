import { randomUUID } from 'node:crypto';
import type { ConsumerConfig, ConsumerEvent, ConsumerEventName, SqlClient } from '@oncely/core';
import {
  ConfigError,
  createConsumer,
  payloadFingerprint,
  processBatchOnce,
  processOnce,
  silentLogger,
} from '@oncely/core';
import { MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { requireService } from '@oncely/testkit';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';

// Payload fingerprints on the marker (issue 14): a duplicate ID carrying a different
// payload is reported (`payloadMismatch`) and skipped or dead-lettered, in every mode
// that writes markers, on the memory broker with PGlite and with the real PostgreSQL.
// Without the feature every such delivery is a silent duplicate, so each test goes red.

const connectionString = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const admin = new pg.Pool({ connectionString, max: 2 });
admin.on('error', () => {});
const hasPostgres = await requireService('PostgreSQL', () => admin.query('SELECT 1'));
const schemas: string[] = [];

afterAll(async () => {
  for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Order = { amount: number; note?: string };

interface Backend {
  name: string;
  available: boolean;
  open(): Promise<PostgresStore>;
}

const backends: Backend[] = [
  {
    name: 'PGlite',
    available: true,
    async open() {
      const store = PostgresStore.embedded();
      cleanups.push(() => store.close());
      return store;
    },
  },
  {
    name: 'PostgreSQL',
    available: hasPostgres,
    async open() {
      const schema = `oncely_fp_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
      schemas.push(schema);
      const store = new PostgresStore({ connectionString, schema, poolMax: 4 });
      cleanups.push(() => store.close());
      return store;
    },
  },
];

for (const backend of backends) {
  describe.skipIf(!backend.available)(`payload fingerprints, memory broker + ${backend.name}`, () => {
    async function setup() {
      const store = await backend.open();
      await store.migrate();
      await store.transaction((tx) =>
        tx.query(`CREATE TABLE "${store.schema}".effects (message_id text NOT NULL, amount int NOT NULL)`),
      );
      const broker = new MemoryBroker();
      cleanups.push(() => broker.close());
      return { store, broker };
    }

    async function start(
      store: PostgresStore,
      broker: MemoryBroker,
      queue: string,
      options: Partial<ConsumerConfig<Order>> = {},
    ) {
      const events = new Map<ConsumerEventName, ConsumerEvent[]>();
      const consumer = await createConsumer<Order>({
        name: `fp-${queue}`,
        broker: { type: 'memory', broker, queue, visibilityTimeoutMs: 2000 },
        store,
        logger: silentLogger,
        payloadFingerprint: true,
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${store.schema}".effects (message_id, amount) VALUES ($1, $2)`, [
            message.id,
            message.body.amount,
          ]);
        },
        ...options,
      });
      for (const name of ['processed', 'duplicate', 'payloadMismatch', 'deadLettered', 'failed'] as const) {
        events.set(name, []);
        consumer.on(name, (event) => events.get(name)!.push(event));
      }
      cleanups.push(() => consumer.stop());
      await consumer.start();
      return (name: ConsumerEventName) => events.get(name)!;
    }

    async function settle(broker: MemoryBroker, queue: string) {
      expect(await broker.waitForIdle(queue, { timeoutMs: 15_000 })).toBe(true);
    }

    async function effects(store: PostgresStore): Promise<Array<[string, number]>> {
      const { rows } = await store.transaction((tx) =>
        tx.query<{ message_id: string; amount: number }>(
          `SELECT message_id, amount FROM "${store.schema}".effects ORDER BY message_id, amount`,
        ),
      );
      return rows.map((row) => [row.message_id, row.amount]);
    }

    it('transactional, default policy: a duplicate with another body is reported and skipped; the same body is a plain duplicate', async () => {
      const { store, broker } = await setup();
      const events = await start(store, broker, 'tx-skip');
      await broker.send('tx-skip', { id: 'o-1', body: { amount: 40 } });
      await settle(broker, 'tx-skip');
      // Same ID, another amount (a producer bug or a reused ID), then the same body again.
      await broker.send('tx-skip', { id: 'o-1', body: { amount: 99 } });
      await settle(broker, 'tx-skip');
      await broker.send('tx-skip', { id: 'o-1', body: { amount: 40 } });
      await settle(broker, 'tx-skip');

      expect(await effects(store)).toEqual([['o-1', 40]]);
      expect(events('payloadMismatch')).toHaveLength(1);
      expect(events('payloadMismatch')[0]).toMatchObject({
        messageId: 'o-1',
        payloadMismatch: {
          storedFingerprint: payloadFingerprint({ body: { amount: 40 } }),
          fingerprint: payloadFingerprint({ body: { amount: 99 } }),
        },
      });
      // Skipped: acked as a duplicate (both copies), nothing dead-lettered.
      expect(events('duplicate')).toHaveLength(2);
      expect(broker.deadLetters('tx-skip')).toEqual([]);
      // The fingerprint sits on the marker, in the column migration 0002 added.
      const { rows } = await store.transaction((tx) =>
        tx.query<{ fingerprint: string }>(
          `SELECT fingerprint FROM "${store.schema}".processed_messages WHERE message_id = 'o-1'`,
        ),
      );
      expect(rows).toEqual([{ fingerprint: payloadFingerprint({ body: { amount: 40 } }) }]);
    });

    it("transactional, onPayloadMismatch 'dead-letter': the mismatching copy goes to the DLQ with reason payload-mismatch", async () => {
      const { store, broker } = await setup();
      const events = await start(store, broker, 'tx-dlq', { onPayloadMismatch: 'dead-letter' });
      await broker.send('tx-dlq', { id: 'o-2', body: { amount: 10 } });
      await settle(broker, 'tx-dlq');
      await broker.send('tx-dlq', { id: 'o-2', body: { amount: 11 } });
      await settle(broker, 'tx-dlq');

      expect(await effects(store)).toEqual([['o-2', 10]]);
      expect(events('payloadMismatch')).toHaveLength(1);
      expect(events('duplicate')).toHaveLength(0);
      const dead = broker.deadLetters('tx-dlq');
      expect(dead.map((d) => [d.producerMessageId, d.reason, d.body])).toEqual([
        ['o-2', 'payload-mismatch', { amount: 11 }],
      ]);
      expect(events('deadLettered').map((e) => e.reason)).toEqual(['payload-mismatch']);
    });

    it('covers the selected attributes only', async () => {
      const { store, broker } = await setup();
      const events = await start(store, broker, 'tx-attr', {
        payloadFingerprint: { attributes: ['tenant'] },
      });
      await broker.send('tx-attr', {
        id: 'o-3',
        body: { amount: 5 },
        attributes: { tenant: 'a', trace: '1' },
      });
      await settle(broker, 'tx-attr');
      // Another trace (not selected): a plain duplicate.
      await broker.send('tx-attr', {
        id: 'o-3',
        body: { amount: 5 },
        attributes: { tenant: 'a', trace: '2' },
      });
      await settle(broker, 'tx-attr');
      expect(events('payloadMismatch')).toHaveLength(0);
      // Another tenant, same body: a mismatch; and no tenant at all differs from tenant ''.
      await broker.send('tx-attr', { id: 'o-3', body: { amount: 5 }, attributes: { tenant: 'b' } });
      await settle(broker, 'tx-attr');
      await broker.send('tx-attr', { id: 'o-4', body: { amount: 6 }, attributes: { tenant: '' } });
      await settle(broker, 'tx-attr');
      await broker.send('tx-attr', { id: 'o-4', body: { amount: 6 } });
      await settle(broker, 'tx-attr');

      expect(events('payloadMismatch').map((e) => e.messageId)).toEqual(['o-3', 'o-4']);
      expect(await effects(store)).toEqual([
        ['o-3', 5],
        ['o-4', 6],
      ]);
    });

    it('a custom fingerprint function decides what counts as the same payload', async () => {
      const { store, broker } = await setup();
      const events = await start(store, broker, 'tx-fn', {
        payloadFingerprint: (message) => String(message.body.amount),
      });
      await broker.send('tx-fn', { id: 'o-5', body: { amount: 7, note: 'first' } });
      await settle(broker, 'tx-fn');
      await broker.send('tx-fn', { id: 'o-5', body: { amount: 7, note: 'edited' } });
      await settle(broker, 'tx-fn');
      expect(events('payloadMismatch')).toHaveLength(0);
      await broker.send('tx-fn', { id: 'o-5', body: { amount: 8 } });
      await settle(broker, 'tx-fn');
      expect(events('payloadMismatch')).toHaveLength(1);
      expect(events('duplicate')).toHaveLength(2);
    });

    it("leased mode: the completed claim's fingerprint is compared, and the mismatch dead-lettered", async () => {
      const { store, broker } = await setup();
      const calls: Array<[string, number]> = [];
      const events = await start(store, broker, 'leased', {
        mode: 'leased',
        onPayloadMismatch: 'dead-letter',
        handler: async (message) => {
          calls.push([message.id, message.body.amount]);
          return { charged: message.body.amount };
        },
      });
      await broker.send('leased', { id: 'o-6', body: { amount: 30 } });
      await settle(broker, 'leased');
      await broker.send('leased', { id: 'o-6', body: { amount: 30 } });
      await settle(broker, 'leased');
      await broker.send('leased', { id: 'o-6', body: { amount: 31 } });
      await settle(broker, 'leased');

      expect(calls).toEqual([['o-6', 30]]);
      expect(events('duplicate')).toHaveLength(1);
      expect(events('payloadMismatch')).toHaveLength(1);
      expect(broker.deadLetters('leased').map((d) => [d.producerMessageId, d.reason])).toEqual([
        ['o-6', 'payload-mismatch'],
      ]);
    });

    it('batch mode: mismatches against earlier markers and inside one batch are both caught', async () => {
      const { store, broker } = await setup();
      const events = await start(store, broker, 'batch', {
        concurrency: 4,
        batch: { size: 4, maxWaitMs: 50 },
      });
      for (const id of ['b-1', 'b-2']) await broker.send('batch', { id, body: { amount: 1 } });
      await settle(broker, 'batch');
      // b-1 again with the same body, b-2 with another; b-3 twice with different bodies
      // (the same batch or two: either way one copy runs and one mismatches).
      await broker.send('batch', { id: 'b-1', body: { amount: 1 } });
      await broker.send('batch', { id: 'b-2', body: { amount: 2 } });
      await broker.send('batch', { id: 'b-3', body: { amount: 3 } });
      await broker.send('batch', { id: 'b-3', body: { amount: 4 } });
      await settle(broker, 'batch');

      const mismatched = events('payloadMismatch').map((e) => e.messageId);
      expect(mismatched.sort()).toEqual(['b-2', 'b-3']);
      const rows = await effects(store);
      expect(rows.filter(([id]) => id !== 'b-3')).toEqual([
        ['b-1', 1],
        ['b-2', 1],
      ]);
      expect(rows.filter(([id]) => id === 'b-3')).toHaveLength(1);
      expect(events('processed')).toHaveLength(3);
      expect(events('duplicate')).toHaveLength(3);
    });

    it('a marker written without a fingerprint never mismatches, and a consumer without the option writes none', async () => {
      const { store, broker } = await setup();
      const plain = await start(store, broker, 'mixed', { payloadFingerprint: false });
      await broker.send('mixed', { id: 'm-1', body: { amount: 1 } });
      await settle(broker, 'mixed');
      // Fingerprints off: another body is a silent duplicate, as before.
      await broker.send('mixed', { id: 'm-1', body: { amount: 2 } });
      await settle(broker, 'mixed');
      expect(plain('duplicate')).toHaveLength(1);
      const { rows } = await store.transaction((tx) =>
        tx.query<{ fingerprint: string | null }>(
          `SELECT fingerprint FROM "${store.schema}".processed_messages WHERE message_id = 'm-1'`,
        ),
      );
      expect(rows).toEqual([{ fingerprint: null }]);
    });

    it('processOnce and processBatchOnce store and compare a fingerprint', async () => {
      const { store } = await setup();
      const key = { consumer: 'fp-direct', messageId: 'p-1' };
      const first = payloadFingerprint({ body: '{"amount":1}' });
      const other = payloadFingerprint({ body: '{"amount":2}' });
      const work = (amount: number) => async (tx: SqlClient) => {
        await tx.query(`INSERT INTO "${store.schema}".effects (message_id, amount) VALUES ($1, $2)`, [
          'p-1',
          amount,
        ]);
        return amount;
      };
      expect(await processOnce(store, key, work(1), { fingerprint: first })).toEqual({
        status: 'processed',
        result: 1,
      });
      expect(await processOnce(store, key, work(1), { fingerprint: first })).toEqual({ status: 'duplicate' });
      expect(await processOnce(store, key, work(2), { fingerprint: other })).toEqual({
        status: 'duplicate',
        payloadMismatch: { storedFingerprint: first, fingerprint: other },
      });
      // Without a fingerprint the call is the plain one.
      expect(await processOnce(store, key, work(2))).toEqual({ status: 'duplicate' });

      const results = await processBatchOnce<number | string>(store, 'fp-direct', [
        { messageId: 'p-1', fingerprint: other, work: work(3) },
        { messageId: 'p-2', fingerprint: first, work: async () => 'p-2' },
        { messageId: 'p-2', fingerprint: other, work: async () => 'again' },
        { messageId: 'p-3', fingerprint: first, work: async () => 'p-3' },
        { messageId: 'p-3', fingerprint: first, work: async () => 'again' },
      ]);
      expect(results).toEqual([
        { status: 'duplicate', payloadMismatch: { storedFingerprint: first, fingerprint: other } },
        { status: 'processed', result: 'p-2' },
        { status: 'duplicate', payloadMismatch: { storedFingerprint: first, fingerprint: other } },
        { status: 'processed', result: 'p-3' },
        { status: 'duplicate' },
      ]);
      expect(await effects(store)).toEqual([['p-1', 1]]);
    });
  });
}

describe('payload fingerprint options', () => {
  it('refuses bad options, offsets mode, and a store that keeps no fingerprints', async () => {
    const broker = new MemoryBroker();
    cleanups.push(() => broker.close());
    const store = PostgresStore.embedded();
    cleanups.push(() => store.close());
    const base = {
      name: 'fp-config',
      broker: { type: 'memory' as const, broker, queue: 'config' },
      store,
      handler: async () => {},
    };
    await expect(createConsumer({ ...base, payloadFingerprint: 'yes' as never })).rejects.toThrow(
      /payloadFingerprint must be true, false, \{ attributes/,
    );
    await expect(
      createConsumer({ ...base, payloadFingerprint: { attributes: ['tenant', ''] } }),
    ).rejects.toBeInstanceOf(ConfigError);
    await expect(createConsumer({ ...base, onPayloadMismatch: 'drop' as never })).rejects.toThrow(
      /onPayloadMismatch must be 'skip' or 'dead-letter'/,
    );
    await expect(createConsumer({ ...base, mode: 'offsets', payloadFingerprint: true })).rejects.toThrow(
      /payloadFingerprint needs processed markers/,
    );
    // A store of its own making with no fingerprint side (the interface makes it optional).
    const { fingerprints: _, ...withoutFingerprints } = Object.getOwnPropertyDescriptors(store);
    const bare = Object.create(Object.getPrototypeOf(store), withoutFingerprints) as PostgresStore;
    await expect(createConsumer({ ...base, store: bare, payloadFingerprint: true })).rejects.toThrow(
      /store keeps no payload fingerprints/,
    );
    await expect(
      processOnce(bare, { consumer: 'c', messageId: 'm' }, async () => 1, { fingerprint: 'x' }),
    ).rejects.toThrow(/keeps no payload fingerprints/);
  });

  it('counts mismatches on the oncely.messages.payload_mismatches counter', async () => {
    const reader = new PeriodicExportingMetricReader({
      exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
      exportIntervalMillis: 3_600_000,
    });
    const meterProvider = new MeterProvider({ readers: [reader] });
    cleanups.push(() => meterProvider.shutdown());
    const broker = new MemoryBroker();
    cleanups.push(() => broker.close());
    const store = PostgresStore.embedded();
    cleanups.push(() => store.close());
    await store.migrate();
    const consumer = await createConsumer({
      name: 'fp-metrics',
      broker: { type: 'memory', broker, queue: 'metrics' },
      store,
      bodyFormat: 'text',
      logger: silentLogger,
      payloadFingerprint: true,
      telemetry: { meterProvider },
      handler: async () => {},
    });
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await broker.send('metrics', { id: 'x-1', body: 'one' });
    expect(await broker.waitForIdle('metrics', { timeoutMs: 15_000 })).toBe(true);
    await broker.send('metrics', { id: 'x-1', body: 'two' });
    expect(await broker.waitForIdle('metrics', { timeoutMs: 15_000 })).toBe(true);
    const { resourceMetrics } = await reader.collect();
    const mismatches = resourceMetrics.scopeMetrics
      .flatMap((scope) => scope.metrics)
      .filter((metric) => metric.descriptor.name === 'oncely.messages.payload_mismatches')
      .flatMap((metric) => metric.dataPoints.map((point) => point.value));
    expect(mismatches).toEqual([1]);
  });
});
