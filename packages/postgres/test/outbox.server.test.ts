import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { isOncelyError, publishInTransaction } from '@oncely/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createRelay, LATEST_VERSION, PostgresStore } from '../src/index.js';
import { admin, connectionString, dropSchema, hasPostgres, uniqueSchema } from './serverEnv.js';

// The outbox on the real server: writes commit or roll back with their transaction, and
// the relay's claims hold across connections (late commits, competing relays, crashes).

let failed = false;
const schemas: string[] = [];
const stores: PostgresStore[] = [];

async function openStore(schema = uniqueSchema('outbox')): Promise<PostgresStore> {
  if (!schemas.includes(schema)) schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, poolMax: 4 });
  stores.push(store);
  await store.migrate();
  return store;
}

/** A producer that keeps what it was given, failing the sends `fail` picks. */
class RecordingProducer implements OutboxProducer {
  readonly sent: OutboxMessage[] = [];
  readonly calls: OutboxMessage[][] = [];
  constructor(
    private readonly fail: (message: OutboxMessage) => OutboxSendResult | undefined = () => undefined,
    private readonly pause?: () => Promise<void>,
  ) {}
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    this.calls.push([...messages]);
    if (this.pause) await this.pause();
    return messages.map((message) => {
      const failure = this.fail(message);
      if (failure) return failure;
      this.sent.push(message);
      return { ok: true };
    });
  }
}

/**
 * How long a wait on the relay may take before it is called stuck. A relay sends only rows
 * below the cluster-wide snapshot xmin, so any session's open transaction on the shared
 * server holds new rows back until it ends: other suites run beside this one, and a
 * session they cut off mid-transaction (a TCP proxy outage) stays open until the store's
 * idle_in_transaction_session_timeout (60 s by default) ends it. Failed on Node 22 beside
 * the ElasticMQ suite with 20 s and 30 s bounds ("relay did not drain within 20 s", 400 of
 * 600 sent). A "does not hang" bound, above that 60 s, not a speed check.
 */
const RELAY_WAIT_MS = 150_000;
/** The test timeout of the tests that wait on the relay: above RELAY_WAIT_MS. */
const RELAY_TEST_MS = 200_000;

async function rows(store: PostgresStore) {
  const { rows } = await admin.query<{
    id: string;
    status: string;
    attempts: number;
    last_error: string | null;
  }>(`SELECT id, status, attempts, last_error FROM "${store.schema}".outbox ORDER BY position`);
  return rows;
}

/**
 * Runs relay rounds until nothing pending is left. The snapshot's xmin is cluster-wide:
 * another session's open transaction (other tests share the server) can hold rows back
 * for a moment, so an empty round is not the end until the table says so.
 */
async function drain(relay: ReturnType<typeof createRelay>, store?: PostgresStore): Promise<void> {
  const deadline = Date.now() + RELAY_WAIT_MS;
  for (;;) {
    const round = await relay.runOnce();
    if (round.claimed > 0) continue;
    if (!store) return;
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${store.schema}".outbox WHERE status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= now())`,
    );
    if (rows[0]!.n === 0) return;
    if (Date.now() > deadline) throw new Error(`relay did not drain within ${RELAY_WAIT_MS / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Waits until every row is below the snapshot's xmin (readable by a relay). */
async function settled(store: PostgresStore): Promise<void> {
  const deadline = Date.now() + RELAY_WAIT_MS;
  for (;;) {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${store.schema}".outbox WHERE xid >= pg_snapshot_xmin(pg_current_snapshot())`,
    );
    if (rows[0]!.n === 0) return;
    if (Date.now() > deadline) throw new Error('outbox rows stayed above xmin for 20 s');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Runs relay rounds until `done()` holds. */
async function roundsUntil(
  relay: ReturnType<typeof createRelay>,
  done: () => boolean,
  what: string,
): Promise<void> {
  const deadline = Date.now() + RELAY_WAIT_MS;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    const round = await relay.runOnce();
    if (round.claimed === 0) await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function text(message: OutboxMessage): string {
  return Buffer.from(message.body).toString('utf8');
}

afterAll(async () => {
  await Promise.all(stores.map((store) => store.close()));
  if (!failed) for (const schema of schemas) await dropSchema(schema);
  await admin.end();
});

describe.skipIf(!hasPostgres)('outbox on the real PostgreSQL', { timeout: RELAY_TEST_MS }, () => {
  it('0003_outbox and 0002 apply in either order: a schema missing either one gets it', async () => {
    try {
      const store = await openStore();
      const s = `"${store.schema}"`;
      const versions = async () =>
        (
          await admin.query<{ version: number }>(`SELECT version FROM ${s}.migrations ORDER BY version`)
        ).rows.map((row) => row.version);
      // A schema at {1, 2}: migrated by a build that did not ship the outbox yet.
      // 0009 only adds indexes to the outbox: dropping the table drops them, so its row goes too.
      await admin.query(`DELETE FROM ${s}.migrations WHERE version IN (3, 5, 7, 8, 9)`);
      await admin.query(`DROP TABLE ${s}.outbox`);
      await admin.query(`DROP TABLE ${s}.outbox_keys`);
      await admin.query(`DROP SEQUENCE ${s}.outbox_key_seq`);
      await admin.query(`DROP FUNCTION ${s}.outbox_notify()`);
      const fresh = new PostgresStore({ connectionString, schema: store.schema, poolMax: 2 });
      stores.push(fresh);
      await expect(fresh.ping()).rejects.toSatisfy((error) => isOncelyError(error, 'SCHEMA_NOT_MIGRATED'));
      expect(await fresh.migrate()).toEqual({
        applied: [
          '0003_outbox',
          '0005_outbox_key_order',
          '0007_outbox_failing_keys',
          '0008_outbox_discards',
          '0009_outbox_stats_indexes',
        ],
        version: LATEST_VERSION,
      });
      await fresh.ping();
      expect(await versions()).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      // A schema at {1, 3}: migrated by a build that shipped the outbox before 0002. The
      // check is per version, not "the highest": 2 is found missing and applied.
      await admin.query(`DELETE FROM ${s}.migrations WHERE version = 2`);
      await admin.query(`ALTER TABLE ${s}.processed_messages DROP COLUMN fingerprint`);
      const later = new PostgresStore({ connectionString, schema: store.schema, poolMax: 2 });
      stores.push(later);
      await expect(later.ping()).rejects.toSatisfy((error) => isOncelyError(error, 'SCHEMA_NOT_MIGRATED'));
      expect(await later.migrate()).toEqual({
        applied: ['0002_payload_fingerprint'],
        version: LATEST_VERSION,
      });
      await later.ping();
      expect(await versions()).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('a rollback writes no row; a commit writes it', async () => {
    try {
      const store = await openStore();
      await expect(
        store.transaction(async (tx) => {
          await publishInTransaction(store, tx, 'orders', { orderId: 1 }, { id: 'rolled-back' });
          throw new Error('the handler failed');
        }),
      ).rejects.toThrow('the handler failed');
      expect(await rows(store)).toEqual([]);

      const id = await store.transaction((tx) =>
        publishInTransaction(store, tx, 'orders', { orderId: 2 }, { id: 'committed', key: 'c-1' }),
      );
      expect(id).toBe('committed');
      const written = await rows(store);
      expect(written).toEqual([{ id: 'committed', status: 'pending', attempts: 0, last_error: null }]);

      const producer = new RecordingProducer();
      const relay = createRelay({ store, producers: producer, listen: false });
      await drain(relay, store);
      expect(producer.sent.map((m) => [m.id, m.destination, m.key, text(m)])).toEqual([
        ['committed', 'orders', 'c-1', '{"orderId":2}'],
      ]);
      expect((await rows(store))[0]!.status).toBe('sent');
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('publishing one message twice under one ID writes one row; bad arguments are refused before any SQL', async () => {
    try {
      const store = await openStore();
      await store.transaction(async (tx) => {
        await publishInTransaction(store, tx, 'orders', 'first', { id: 'same' });
        await publishInTransaction(store, tx, 'orders', 'first', { id: 'same' });
      });
      expect((await rows(store)).map((row) => row.id)).toEqual(['same']);
      await store.transaction(async (tx) => {
        for (const [destination, options] of [
          ['', {}],
          ['orders', { id: '' }],
          ['orders', { key: 7 }],
          ['orders', { attributes: { n: 1 } }],
        ] as const) {
          await expect(publishInTransaction(store, tx, destination, 'x', options as never)).rejects.toSatisfy(
            (error) => isOncelyError(error, 'CONFIG_INVALID'),
          );
        }
      });
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('a row committed late, after a later one was sent, is still sent', async () => {
    try {
      const store = await openStore();
      const producer = new RecordingProducer();
      const relay = createRelay({ store, producers: producer, listen: false });
      // The early writer takes its xid (and its identity value) first, then waits.
      const early = new pg.Client({ connectionString });
      await early.connect();
      try {
        await early.query('BEGIN');
        await early.query(
          `INSERT INTO "${store.schema}".outbox (id, destination, body) VALUES ('early', 'q', '\\x31')`,
        );
        await store.transaction((tx) =>
          publishInTransaction(store, tx, 'q', 'late-started', { id: 'later' }),
        );
        // 'later' committed, but an older transaction is open: it is not below xmin yet.
        await drain(relay, undefined);
        expect(producer.sent.map((m) => m.id)).toEqual([]);
        await early.query('COMMIT');
      } finally {
        await early.end();
      }
      await drain(relay, store);
      expect(producer.sent.map((m) => m.id)).toEqual(['early', 'later']);

      // The case a position cursor loses: a row with a smaller position commits after a
      // row with a larger one was already sent.
      const fast = new pg.Client({ connectionString });
      const slow = new pg.Client({ connectionString });
      await fast.connect();
      await slow.connect();
      try {
        await fast.query('BEGIN');
        await fast.query('SELECT pg_current_xact_id()');
        await slow.query('BEGIN');
        await slow.query(
          `INSERT INTO "${store.schema}".outbox (id, destination, body) VALUES ('committed-late', 'q', '\\x32')`,
        );
        await fast.query(
          `INSERT INTO "${store.schema}".outbox (id, destination, body) VALUES ('sent-first', 'q', '\\x33')`,
        );
        await fast.query('COMMIT');
        await roundsUntil(
          relay,
          () => producer.sent.some((m) => m.id === 'sent-first'),
          "'sent-first' to be sent",
        );
        expect(producer.sent.map((m) => m.id)).toEqual(['early', 'later', 'sent-first']);
        await slow.query('COMMIT');
      } finally {
        await fast.end();
        await slow.end();
      }
      const { rows: positions } = await admin.query<{ id: string; position: string }>(
        `SELECT id, position::text FROM "${store.schema}".outbox WHERE id IN ('committed-late', 'sent-first') ORDER BY position`,
      );
      expect(positions.map((row) => row.id)).toEqual(['committed-late', 'sent-first']);
      await drain(relay, store);
      expect(producer.sent.map((m) => m.id)).toEqual(['early', 'later', 'sent-first', 'committed-late']);
      expect((await rows(store)).every((row) => row.status === 'sent')).toBe(true);
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('two relays never send one row twice (no crashes)', async () => {
    try {
      const store = await openStore();
      const twin = await openStore(store.schema);
      const total = 600;
      for (let start = 0; start < total; start += 100) {
        await store.transaction(async (tx) => {
          for (let i = start; i < start + 100; i++) {
            await publishInTransaction(
              store,
              tx,
              'q',
              { i },
              { id: `m-${i}`, ...(i % 3 ? { key: `k-${i % 7}` } : {}) },
            );
          }
        });
      }
      const producer = new RecordingProducer(
        undefined,
        () => new Promise((resolve) => setTimeout(resolve, 2)),
      );
      const a = createRelay({ store, producers: producer, batchSize: 25, pollIntervalMs: 50, name: 'a' });
      const b = createRelay({
        store: twin,
        producers: producer,
        batchSize: 25,
        pollIntervalMs: 50,
        name: 'b',
      });
      const byRelay = { a: 0, b: 0 };
      a.on('sent', () => byRelay.a++);
      b.on('sent', () => byRelay.b++);
      await Promise.all([a.start(), b.start()]);
      const deadline = Date.now() + RELAY_WAIT_MS;
      while (producer.sent.length < total && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 25));
      await Promise.all([a.stop(), b.stop()]);
      const ids = producer.sent.map((m) => m.id);
      expect(new Set(ids).size).toBe(total);
      expect(ids.length).toBe(total);
      // Both did work, or this would prove nothing about competing relays.
      expect(byRelay.a).toBeGreaterThan(0);
      expect(byRelay.b).toBeGreaterThan(0);
      expect(byRelay.a + byRelay.b).toBe(total);
      // Per key, in written order.
      for (let k = 0; k < 7; k++) {
        const order = producer.sent.filter((m) => m.key === `k-${k}`).map((m) => Number(m.id.slice(2)));
        expect(order).toEqual([...order].sort((x, y) => x - y));
      }
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('per-key order holds with one failing send in the middle', async () => {
    try {
      const store = await openStore();
      await store.transaction(async (tx) => {
        for (let i = 1; i <= 5; i++)
          await publishInTransaction(store, tx, 'q', { i }, { id: `a-${i}`, key: 'A' });
        for (let i = 1; i <= 3; i++)
          await publishInTransaction(store, tx, 'q', { i }, { id: `b-${i}`, key: 'B' });
      });
      let failures = 2;
      const producer = new RecordingProducer((message) =>
        message.id === 'a-3' && failures-- > 0
          ? { ok: false, error: new Error('broker said no') }
          : undefined,
      );
      const relay = createRelay({
        store,
        producers: producer,
        listen: false,
        backoff: { initialMs: 1, maxMs: 1, jitter: 0 },
      });
      await settled(store);
      const first = await relay.runOnce();
      expect(first).toMatchObject({ sent: 5, failed: 1, deadLettered: 0 });
      // a-4 and a-5 wait behind a-3; B is not held up by A.
      expect(producer.sent.map((m) => m.id).sort()).toEqual(['a-1', 'a-2', 'b-1', 'b-2', 'b-3']);
      const a3 = (await rows(store)).find((row) => row.id === 'a-3')!;
      expect(a3).toMatchObject({ status: 'pending', attempts: 1 });
      expect(a3.last_error).toContain('broker said no');
      await new Promise((r) => setTimeout(r, 5));
      await drain(relay, store);
      expect(producer.sent.filter((m) => m.key === 'A').map((m) => m.id)).toEqual([
        'a-1',
        'a-2',
        'a-3',
        'a-4',
        'a-5',
      ]);
      // Never two messages of one key in one producer call.
      for (const call of producer.calls) {
        const keys = call.flatMap((m) => (m.key ? [m.key] : []));
        expect(new Set(keys).size).toBe(keys.length);
      }
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('a key whose head waits out its backoff with ≥ batchSize rows behind it does not stall other keys', async () => {
    try {
      const store = await openStore();
      // 120 rows of the failing key K first, then 25 rows of healthy keys: in (xid, position)
      // order every claim of 100 rows would be K's.
      await store.transaction(async (tx) => {
        for (let i = 1; i <= 121; i++)
          await publishInTransaction(store, tx, 'q', { i }, { id: `k-${i}`, key: 'K' });
      });
      await store.transaction(async (tx) => {
        for (let i = 1; i <= 25; i++)
          await publishInTransaction(store, tx, 'q', { i }, { id: `h-${i}`, key: `H${i % 5}` });
      });
      const producer = new RecordingProducer((message) =>
        message.key === 'K' ? { ok: false, error: new Error('K is broken') } : undefined,
      );
      const relay = createRelay({
        store,
        producers: producer,
        listen: false,
        batchSize: 100,
        backoff: { initialMs: 60_000, maxMs: 60_000, jitter: 0 },
      });
      await settled(store);
      const first = await relay.runOnce();
      expect(first).toMatchObject({ failed: 1 });
      // K's head is in its backoff now: the next rounds must send every healthy row.
      for (let round = 0; round < 5 && producer.sent.length < 25; round++) await relay.runOnce();
      expect(producer.sent.length).toBe(25);
      // Nothing of K went out behind its failing head, and K's head was tried once.
      expect(
        producer.calls
          .flat()
          .filter((m) => m.key === 'K')
          .map((m) => m.id),
      ).toEqual(['k-1']);
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('per-key order is commit order: 10 writers "lock, read, publish", 3 relays, 500 events, none out of order', async () => {
    try {
      const schema = uniqueSchema('outbox');
      schemas.push(schema);
      const store = new PostgresStore({ connectionString, schema, poolMax: 14 });
      stores.push(store);
      await store.migrate();
      const s = `"${store.schema}"`;
      await admin.query(`CREATE TABLE ${s}.counters (key text PRIMARY KEY, n integer NOT NULL)`);
      await admin.query(`CREATE TABLE ${s}.noise (n integer)`);
      const keys = ['A', 'B', 'C'];
      await admin.query(`INSERT INTO ${s}.counters SELECT unnest($1::text[]), 0`, [keys]);
      const received = new Map<string, number[]>();
      const producer = new RecordingProducer(undefined, async () => {
        await new Promise((r) => setTimeout(r, Math.random() * 3));
      });
      const recorder: OutboxProducer = {
        async send(messages) {
          const results = await producer.send(messages);
          for (const m of messages) {
            const list = received.get(m.key!) ?? [];
            list.push(JSON.parse(text(m)).n);
            received.set(m.key!, list);
          }
          return results;
        },
      };
      const relays = [1, 2, 3].map((i) =>
        createRelay({ store, producers: recorder, name: `r${i}`, batchSize: 20, pollIntervalMs: 20 }),
      );
      await Promise.all(relays.map((relay) => relay.start()));
      const writers = 10;
      const perWriter = 50;
      try {
        await Promise.all(
          Array.from({ length: writers }, async (_, w) => {
            for (let i = 0; i < perWriter; i++) {
              const key = keys[(w + i) % keys.length]!;
              await store.transaction(async (tx) => {
                // A write first, so the transaction has its xid before it waits for the lock.
                await tx.query(`INSERT INTO ${s}.noise VALUES (1)`);
                await new Promise((r) => setTimeout(r, Math.random() * 2));
                const { rows } = await tx.query<{ n: number }>(
                  `SELECT n FROM ${s}.counters WHERE key = $1 FOR UPDATE`,
                  [key],
                );
                const n = rows[0]!.n + 1;
                await tx.query(`UPDATE ${s}.counters SET n = $2 WHERE key = $1`, [key, n]);
                await publishInTransaction(store, tx, 'q', { n }, { id: `${key}-${n}`, key });
              });
            }
          }),
        );
        const total = writers * perWriter;
        const deadline = Date.now() + RELAY_WAIT_MS;
        while (producer.sent.length < total) {
          if (Date.now() > deadline) throw new Error(`only ${producer.sent.length} of ${total} sent`);
          await new Promise((r) => setTimeout(r, 50));
        }
      } finally {
        await Promise.all(relays.map((relay) => relay.stop()));
      }
      let outOfOrder = 0;
      for (const list of received.values())
        for (let i = 1; i < list.length; i++) if (list[i]! < list[i - 1]!) outOfOrder++;
      expect(outOfOrder).toBe(0);
      expect(producer.sent.length).toBe(500);
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('dead-letters a row that always fails, with its reason; retry() sends it again', async () => {
    try {
      const store = await openStore();
      await store.transaction(async (tx) => {
        await publishInTransaction(store, tx, 'q', 1, { id: 'poison', key: 'K' });
        await publishInTransaction(store, tx, 'q', 2, { id: 'after', key: 'K' });
        await publishInTransaction(store, tx, 'nowhere', 3, { id: 'no-producer' });
      });
      let broken = true;
      const producer = new RecordingProducer((message) =>
        broken && message.id === 'poison'
          ? { ok: false, error: new Error('too large'), permanent: true }
          : undefined,
      );
      const dead: string[] = [];
      const relay = createRelay({
        store,
        producers: { q: producer },
        listen: false,
        maxAttempts: 2,
        backoff: { initialMs: 1, maxMs: 1, jitter: 0 },
      });
      relay.on('deadLettered', (event) => dead.push(event.id));
      await relay.runOnce();
      await new Promise((r) => setTimeout(r, 5));
      await drain(relay, store);
      expect(dead.sort()).toEqual(['no-producer', 'poison']);
      const after = await rows(store);
      expect(after.find((row) => row.id === 'poison')).toMatchObject({ status: 'failed', attempts: 1 });
      expect(after.find((row) => row.id === 'no-producer')!.last_error).toContain(
        "no producer for destination 'nowhere'",
      );
      expect(after.find((row) => row.id === 'after')!.status).toBe('sent');
      expect(await store.outbox.stats()).toMatchObject({ pending: 0, failed: 2, lagMs: null });
      expect((await store.outbox.stuck()).map((row) => row.id).sort()).toEqual(['no-producer', 'poison']);

      broken = false;
      expect(await store.outbox.retry(['poison'])).toEqual(['poison']);
      await drain(relay, store);
      expect(producer.sent.map((m) => m.id)).toEqual(['after', 'poison']);
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it("after a crash between send and mark, the relay's duplicates carry the same ID", async () => {
    try {
      const store = await openStore();
      await store.transaction(async (tx) => {
        for (let i = 1; i <= 3; i++)
          await publishInTransaction(store, tx, 'q', { i }, { key: 'K', id: `crash-${i}` });
      });
      // A relay on its own connection pool; its connection is killed right after the
      // broker confirmed, before the marks commit (a process crash looks the same to the server).
      const doomed = await openStore(store.schema);
      const sentBeforeCrash: OutboxMessage[] = [];
      const crashing: OutboxProducer = {
        async send(messages) {
          sentBeforeCrash.push(...messages);
          await admin.query(
            `SELECT pg_terminate_backend(pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
             WHERE c.relname = 'outbox' AND c.relnamespace = $1::regnamespace AND l.mode = 'RowShareLock' AND pid <> pg_backend_pid()`,
            [`"${store.schema}"`],
          );
          return messages.map(() => ({ ok: true as const }));
        },
      };
      await settled(store);
      await expect(
        createRelay({ store: doomed, producers: crashing, listen: false }).runOnce(),
      ).rejects.toThrow();
      // The round went on sending (crash-2 and crash-3 in later waves) but could not mark.
      expect(sentBeforeCrash.map((m) => m.id)).toEqual(['crash-1', 'crash-2', 'crash-3']);
      expect((await rows(store)).every((row) => row.status === 'pending' && row.attempts === 0)).toBe(true);

      const producer = new RecordingProducer();
      await drain(createRelay({ store, producers: producer, listen: false }), store);
      expect(producer.sent.map((m) => m.id)).toEqual(['crash-1', 'crash-2', 'crash-3']);
      expect(producer.sent.map(text)).toEqual(sentBeforeCrash.map(text));
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('wakes on NOTIFY without waiting for its poll interval, and prune() removes sent rows', async () => {
    try {
      const store = await openStore();
      const producer = new RecordingProducer();
      const relay = createRelay({ store, producers: producer, pollIntervalMs: 600_000 });
      const sent = new Promise<string>((resolve) => relay.once('sent', (event) => resolve(event.id)));
      await relay.start();
      await new Promise((r) => setTimeout(r, 50));
      await store.transaction((tx) =>
        publishInTransaction(store, tx, 'q', 'hello', { id: 'notified', key: 'notified' }),
      );
      expect(await sent).toBe('notified');
      await relay.stop();
      await store.prune({ olderThan: new Date(Date.now() + 60_000) });
      expect(await rows(store)).toEqual([]);
    } catch (error) {
      failed = true;
      throw error;
    }
  });
});
