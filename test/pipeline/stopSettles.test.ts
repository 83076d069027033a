/**
 * stop() settles every delivery it aborted before it resolves, on the real PostgreSQL
 * store, with the release path slowed down (a rollback and a take-back of the run's
 * up-front count that each take a while, as on a busy database): every aborted message
 * is released (its `released` event emitted, its count taken back) and visible on the
 * broker again the moment stop() resolves, not after its lease. Then the store is closed
 * at once, as an application does after stop(): nothing may touch it afterwards.
 *
 * Two brokers: the in-process memory broker, and the PostgreSQL-table queue
 * (../conformance/fixtures/pgQueue.mjs), whose adapter close() ends its pool, so a
 * release sent after it fails instead of landing late.
 */
import { randomBytes } from 'node:crypto';
import {
  type BrokerAdapter,
  Consumer,
  type ConsumerEvent,
  type ConsumerEventName,
  type Handler,
  type IdempotencyStore,
  type Logger,
  type SqlClient,
} from '@oncely/core';
import { createAdapter as createMemoryAdapter, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { Latch, requireService, waitFor } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgQueueClient, pgQueueModule } from '../conformance/fixtures/pgQueue.mjs';
import { placeholderBroker } from './ScriptedAdapter.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
/** Far longer than any wait here: a message visible again before it was released, not by its lease lapsing. */
const LEASE_MS = 60_000;
/** Added to each aborted run's rollback and to its count's take-back: together many times stopTimeoutMs. */
const SLOW_MS = 150;

// Under CI=true (what scripts/test.sh sets) a missing server fails the run instead.
const hasPostgres = await requireService('PostgreSQL', async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3000 });
  await client.connect();
  await client.end();
});
/** The title, with why it is skipped when it is. */
const needingPostgres = (title: string) =>
  hasPostgres ? title : `${title} [skipped: PostgreSQL is not reachable at ${DATABASE_URL}]`;

/** A broker under test: publishes, builds the consumer's adapter, and reads what is visible now. */
interface BrokerUnderTest {
  /** Publishes `ids` as first deliveries. */
  send(ids: readonly string[]): Promise<void>;
  /** Publishes `ids`, each as a possible redelivery (a delivery count of 2: its run is counted up front). */
  publishRedelivered(ids: readonly string[]): Promise<void>;
  adapter(log: Logger): BrokerAdapter;
  /** Messages a consumer could receive right now (released, not waiting out a lease). */
  visibleNow(): Promise<number>;
  /** Messages handed out and neither settled nor lapsed. */
  inFlight(): Promise<number>;
  close(): Promise<void>;
}

function memoryBroker(): BrokerUnderTest {
  const broker = new MemoryBroker();
  const queue = `stop-settles-${randomBytes(3).toString('hex')}`;
  broker.createQueue(queue, { visibilityTimeoutMs: LEASE_MS });
  return {
    async send(ids) {
      for (const id of ids) await broker.send(queue, { id, body: {} });
    },
    async publishRedelivered(ids) {
      for (const id of ids) await broker.send(queue, { id, body: {} });
      // Handed out once and given back counted: the consumer's delivery is the second.
      for (const delivery of await broker.receive(queue, { max: ids.length }))
        await broker.nack(delivery.receipt, { countAsDelivery: true });
    },
    adapter: (log) =>
      createMemoryAdapter({ type: 'memory', broker, queue, pollWaitMs: 1_000 }, { consumerName: 'x', log }),
    visibleNow: async () => broker.stats(queue).visible,
    inFlight: async () => broker.stats(queue).inFlight,
    close: async () => broker.close(),
  };
}

function pgQueue(schema: string): BrokerUnderTest {
  const table = `"${schema}"."queue_${randomBytes(3).toString('hex')}"`;
  const client = new PgQueueClient(DATABASE_URL, table);
  const sql = (text: string) => (client as unknown as { pool: pg.Pool }).pool.query(text);
  const pending = (where: string) => async () =>
    (await sql(`SELECT count(*)::int AS n FROM ${table} WHERE NOT done AND ${where}`)).rows[0].n as number;
  return {
    async send(ids) {
      await client.create();
      for (const id of ids) await client.publish(id, '{}');
    },
    async publishRedelivered(ids) {
      await client.create();
      for (const id of ids) await client.publish(id, '{}');
      await sql(`UPDATE ${table} SET delivery_count = 1`);
    },
    adapter: () => pgQueueModule.createAdapter({ connectionString: DATABASE_URL, table, leaseMs: LEASE_MS }),
    visibleNow: pending('visible_at <= clock_timestamp() AND lease_token IS NULL'),
    inFlight: pending('visible_at > clock_timestamp() AND lease_token IS NOT NULL'),
    close: () => client.close(),
  };
}

/**
 * `store` with a slow release path: a transaction whose work threw waits before it rolls
 * back, and a take-back of a count waits before it is sent.
 */
function slowReleasePath(store: IdempotencyStore<SqlClient>): IdempotencyStore<SqlClient> {
  const slow = () => new Promise((resolve) => setTimeout(resolve, SLOW_MS));
  return Object.assign(Object.create(store) as IdempotencyStore<SqlClient>, {
    transaction: <T>(work: (tx: SqlClient) => Promise<T>) =>
      store.transaction(async (tx) => {
        try {
          return await work(tx);
        } catch (error) {
          await slow();
          throw error;
        }
      }),
    forgetAttempt: async (...args: Parameters<IdempotencyStore<SqlClient>['forgetAttempt']>) => {
      await slow();
      return store.forgetAttempt(...args);
    },
  });
}

describe.skipIf(!hasPostgres)(
  needingPostgres('stop() settles every delivery it aborted before it resolves'),
  () => {
    const schema = `oncely_stop_settles_${randomBytes(4).toString('hex')}`;
    let base: PostgresStore;

    beforeAll(async () => {
      base = new PostgresStore({ connectionString: DATABASE_URL, schema });
      await base.migrate();
    });
    afterAll(async () => {
      await base.transaction((tx) => tx.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
      await base.close();
    });

    async function attemptsOf(consumer: string): Promise<number> {
      const { rows } = await base.transaction((tx) =>
        tx.query<{ n: number }>(
          `SELECT coalesce(sum(attempts), 0)::int AS n FROM "${schema}".attempts WHERE consumer = $1`,
          [consumer],
        ),
      );
      return rows[0]!.n;
    }

    for (const [name, make] of [
      ['memory broker', () => memoryBroker()],
      ['PostgreSQL-table queue', () => pgQueue(schema)],
    ] as const) {
      it(`${name}: released, count taken back and visible again the moment stop() resolves`, async () => {
        const broker = make();
        const consumerName = `stop-settles-${randomBytes(3).toString('hex')}`;
        // The consumer's own store, closed right after stop() as an application would.
        const own = new PostgresStore({ connectionString: DATABASE_URL, schema });
        const logged: string[] = [];
        const line = (level: string) => (message: string, fields?: Record<string, unknown>) =>
          logged.push(`${level} ${message} ${fields?.messageId ?? ''}`);
        const log: Logger = { debug: () => {}, info: () => {}, warn: line('warn'), error: line('error') };
        const ids = ['held-1', 'held-2', 'held-3'];
        try {
          await broker.publishRedelivered(ids);
          let running = 0;
          const handler: Handler<unknown, SqlClient> = async (_message, ctx) => {
            running++;
            // Held until the stop deadline aborts it (also if it already has).
            await new Promise((resolve) => {
              if (ctx.signal.aborted) resolve(undefined);
              ctx.signal.addEventListener('abort', resolve, { once: true });
            });
            throw ctx.signal.reason;
          };
          const consumer = new Consumer(
            {
              name: consumerName,
              broker: placeholderBroker(),
              store: slowReleasePath(own),
              concurrency: ids.length,
              handler,
              stopTimeoutMs: 50,
              logger: log,
            },
            broker.adapter(log),
          );
          const events: Array<[ConsumerEventName, ConsumerEvent]> = [];
          for (const event of ['released', 'ackFailed', 'failed'] as const)
            consumer.on(event, (e) => events.push([event, e]));
          await consumer.start();
          await waitFor(() => running === ids.length, {
            timeoutMs: 30_000,
            description: 'three handlers running',
          });
          expect(await attemptsOf(consumerName), 'runs counted up front').toBe(ids.length);

          await consumer.stop();
          // Read at once: what stop() left behind, before anything else can happen.
          const released = events.filter(([event]) => event === 'released').map(([, e]) => e.messageId);
          const visible = await broker.visibleNow();
          await own.close();

          // Soft: a failure shows every symptom at once.
          expect.soft(released.sort(), 'released before stop() resolved').toEqual(ids);
          expect
            .soft(visible, 'messages visible on the broker right after stop() (not after their lease)')
            .toBe(ids.length);
          expect.soft(await attemptsOf(consumerName), 'counts left after the releases').toBe(0);
          expect
            .soft(
              events.filter(([event]) => event !== 'released'),
              'failures and failed settlements',
            )
            .toEqual([]);
          expect
            .soft(
              logged.filter((l) => !l.includes('stop deadline passed')),
              'warnings and errors logged by the time stop() resolved',
            )
            .toEqual([]);
        } finally {
          await broker.close();
          await own.close().catch(() => {});
        }
      });
    }
  },
);

/**
 * Issue 25's question: the stop deadline arrives while a delivery is still being
 * prepared, its run's up-front count (a possible redelivery) in flight. The core has
 * already decided to give it back: its handler must not start (with a signal that is
 * already aborted, a handler waiting for the 'abort' event would never end, and any other
 * would do work the core then rolls back), and it is released, its count taken back,
 * before stop() resolves.
 */
describe.skipIf(!hasPostgres)(
  needingPostgres('a delivery still in prepare when the stop deadline passes'),
  () => {
    const schema = `oncely_stop_prepare_${randomBytes(4).toString('hex')}`;
    let base: PostgresStore;

    beforeAll(async () => {
      base = new PostgresStore({ connectionString: DATABASE_URL, schema });
      await base.migrate();
    });
    afterAll(async () => {
      await base.transaction((tx) => tx.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
      await base.close();
    });

    it('is released without running its handler, its count taken back, before stop() resolves', async () => {
      const broker = memoryBroker();
      const consumerName = `stop-prepare-${randomBytes(3).toString('hex')}`;
      const counting = new Latch();
      const countMayLand = new Latch();
      // The run's up-front count is sent, and its answer held until the stop deadline passed.
      const store = Object.assign(Object.create(base) as IdempotencyStore<SqlClient>, {
        recordAttempt: async (...args: Parameters<IdempotencyStore<SqlClient>['recordAttempt']>) => {
          counting.open();
          const count = await base.recordAttempt(...args);
          await countMayLand.wait();
          return count;
        },
      });
      const deadlinePassed = new Latch();
      const log: Logger = {
        debug: () => {},
        info: () => {},
        warn: (message) => {
          if (message.startsWith('stop deadline passed')) deadlinePassed.open();
        },
        error: () => {},
      };
      let runs = 0;
      const consumer = new Consumer(
        {
          name: consumerName,
          broker: placeholderBroker(),
          store,
          handler: async (_message, ctx) => {
            runs++;
            await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
            throw ctx.signal.reason;
          },
          stopTimeoutMs: 50,
          logger: log,
        },
        broker.adapter(log),
      );
      const released: Array<string | undefined> = [];
      consumer.on('released', (e) => released.push(e.messageId));
      try {
        await broker.publishRedelivered(['in-prepare']);
        await consumer.start();
        await counting.wait();
        const stopping = consumer.stop();
        await deadlinePassed.wait();
        countMayLand.open();
        await stopping;
        const visible = await broker.visibleNow();
        expect.soft(runs, 'handler runs started after the stop deadline').toBe(0);
        expect.soft(released, 'released before stop() resolved').toEqual(['in-prepare']);
        expect.soft(visible, 'visible on the broker right after stop()').toBe(1);
        const { rows } = await base.transaction((tx) =>
          tx.query<{ n: number }>(
            `SELECT coalesce(sum(attempts), 0)::int AS n FROM "${schema}".attempts WHERE consumer = $1`,
            [consumerName],
          ),
        );
        expect.soft(rows[0]!.n, 'counts left after the release').toBe(0);
      } finally {
        countMayLand.open();
        await consumer.stop();
        await broker.close();
      }
    });
  },
);

/**
 * The grace is a bound: a handler that ignores its signal cannot hold stop() forever.
 * What is still unsettled when stopGraceMs runs out is logged with its message ID and
 * counted (`ackFailed`), never dropped in silence; the adapter is closed, so nothing is
 * sent on it later, and the broker hands the message out again after its lease.
 */
describe.skipIf(!hasPostgres)(needingPostgres('a delivery still unsettled when stopGraceMs runs out'), () => {
  const schema = `oncely_stop_grace_${randomBytes(4).toString('hex')}`;
  let base: PostgresStore;

  beforeAll(async () => {
    base = new PostgresStore({ connectionString: DATABASE_URL, schema });
    await base.migrate();
  });
  afterAll(async () => {
    await base.transaction((tx) => tx.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    await base.close();
  });

  it('is logged with its message ID and counted once; nothing is sent on the closed adapter', async () => {
    const broker = memoryBroker();
    const errors: Array<{ message: string; messageId: unknown }> = [];
    const log: Logger = {
      debug: () => {},
      info: () => {},
      warn: () => {},
      error: (message, fields) => errors.push({ message, messageId: fields?.messageId }),
    };
    const handlerMayEnd = new Latch();
    let running = 0;
    const consumer = new Consumer(
      {
        name: `stop-grace-${randomBytes(3).toString('hex')}`,
        broker: placeholderBroker(),
        store: base,
        handler: async () => {
          running++;
          // Ignores ctx.signal.
          await handlerMayEnd.wait();
        },
        stopTimeoutMs: 50,
        stopGraceMs: 200,
        logger: log,
      },
      broker.adapter(log),
    );
    const events: Array<[ConsumerEventName, ConsumerEvent]> = [];
    for (const event of ['released', 'ackFailed', 'processed'] as const)
      consumer.on(event, (e) => events.push([event, e]));
    try {
      await broker.send(['stubborn']);
      await consumer.start();
      await waitFor(() => running === 1, { timeoutMs: 30_000, description: 'the handler running' });
      await consumer.stop();
      expect(
        events.map(([name, e]) => [name, e.messageId]),
        'events by the time stop() resolved',
      ).toEqual([['ackFailed', 'stubborn']]);
      expect(errors, 'errors logged').toEqual([
        {
          message: 'stop grace passed with a delivery unsettled: it returns after its lease',
          messageId: 'stubborn',
        },
      ]);
      // The handler ends after all: its run rolls back, and its release is not sent on the closed adapter.
      handlerMayEnd.open();
      await waitFor(() => consumer.inFlightCount === 0, { timeoutMs: 30_000, description: 'the run to end' });
      expect(
        events.map(([name]) => name),
        'events after the handler ended',
      ).toEqual(['ackFailed']);
      expect(await broker.inFlight(), 'still leased on the broker (it returns after its lease)').toBe(1);
    } finally {
      handlerMayEnd.open();
      await broker.close();
    }
  });
});
