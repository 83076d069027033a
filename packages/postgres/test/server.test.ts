import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Logger, SqlClient } from '@oncely/core';
import { isOncelyError, processOnce, StoreUnavailableError } from '@oncely/core';
import { closedPort } from '@oncely/testkit';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { LATEST_VERSION, PostgresStore, SchemaVersionError } from '../src/index.js';
import { MIGRATIONS } from '../src/migrations/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const WORKER = fileURLToPath(new URL('./fixtures/crashingWorker.mjs', import.meta.url));
const BUILT = fileURLToPath(new URL('../dist/index.js', import.meta.url));

const { schemas, stores } = cleanupAfterFile();

/** A migrated store on a schema of its own; closed and dropped after the file (dropped only if everything passed). */
async function openStore(
  options: { migrate?: boolean; lockTimeoutMs?: number; queryTimeoutMs?: number; logger?: Logger } = {},
) {
  const schema = uniqueSchema('server');
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, poolMax: 6, ...options });
  stores.push(store);
  if (options.migrate !== false) await store.migrate();
  return store;
}

/** Another store (its own pool) on the same schema. */
function twin(store: PostgresStore, options: { lockTimeoutMs?: number } = {}): PostgresStore {
  const other = new PostgresStore({ connectionString, schema: store.schema, poolMax: 6, ...options });
  stores.push(other);
  return other;
}

async function effectsTable(store: PostgresStore): Promise<string> {
  const table = `"${store.schema}".effects`;
  await admin.query(`CREATE TABLE ${table} (message_id text NOT NULL)`);
  return table;
}

async function countRows(sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`, params);
  return rows[0]!.n;
}

/**
 * For stores whose transactions wait on each other's locks by design: no lock_timeout
 * (0), so a waiter gives up only if the holder never commits (the test timeout), not
 * after the default 5 s when a loaded machine delays the holder's commit. A regression
 * still fails: a deadlock is broken by the server's deadlock_timeout (40P01) whatever
 * lock_timeout says.
 */
const WAIT_FOR_LOCKS = { lockTimeoutMs: 0 };

/**
 * Polls until `probe` is truthy, failing after `timeoutMs`: a bound for a state that never
 * comes, inside the 60 s test timeout, not a speed target (was 10 s; issue 25).
 */
async function until(probe: () => Promise<unknown>, what: string, timeoutMs = 45_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe.skipIf(!hasPostgres)('PostgresStore on a real server', () => {
  describe('racing', () => {
    // Catches: IDs claimed in input order. Two batches sharing IDs in opposite orders
    // would lock them in opposite orders and deadlock (40P01).
    it('batch claims of the same 50 IDs in opposite orders from two pools never deadlock and split the IDs', async () => {
      const store = await openStore(WAIT_FOR_LOCKS);
      const other = twin(store, WAIT_FOR_LOCKS);
      const table = await effectsTable(store);
      for (let round = 0; round < 3; round++) {
        const consumer = `batch-${round}`;
        const ids = Array.from({ length: 50 }, (_, i) => `id-${i}`);
        const claimAll = (s: PostgresStore, order: string[]) =>
          s.transaction(async (tx) => {
            const claimed = await s.claim(tx, consumer, order);
            for (const id of claimed)
              await tx.query(`INSERT INTO ${table} VALUES ($1)`, [`${consumer}/${id}`]);
            await tx.query('SELECT pg_sleep(0.02)');
            return claimed;
          });
        const [a, b] = await Promise.all([claimAll(store, ids), claimAll(other, [...ids].reverse())]);
        expect(a.size + b.size).toBe(50);
        expect([...a].filter((id) => b.has(id))).toEqual([]);
        const { rows } = await admin.query<{ n: number; distinct: number }>(
          `SELECT count(*)::int AS n, count(DISTINCT message_id)::int AS distinct FROM ${table} WHERE message_id LIKE $1`,
          [`${consumer}/%`],
        );
        expect(rows[0]).toEqual({ n: 50, distinct: 50 });
      }
    });

    // Catches: an offset upsert that does not re-check after waiting, letting an evicted
    // owner and the new owner both apply one record.
    it('two owners advancing the same offset at once: exactly one applies it', async () => {
      const store = await openStore(WAIT_FOR_LOCKS);
      const other = twin(store, WAIT_FOR_LOCKS);
      const holding = deferred();
      const finish = deferred();
      const first = store.transaction(async (tx) => {
        const advanced = await store.offsets.advance(tx, 'c', 'orders', 0, '7');
        holding.resolve();
        await finish.promise;
        return advanced;
      });
      await holding.promise;
      const second = other.transaction((tx) => other.offsets.advance(tx, 'c', 'orders', 0, '7'));
      await until(
        async () =>
          // This store's offsets table only: another file's lock waiter on a table of the
          // same name must not pass for this one (the statement names the schema).
          (await countRows(`pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, [
            `%"${store.schema}".offsets%`,
          ])) > 0,
        'the second owner to wait on the first',
      );
      finish.resolve();
      expect(await first).toBe(true);
      expect(await second).toBe(false);
      expect(Object.fromEntries(await store.offsets.read('c', 'orders'))).toEqual({ 0: '8' });
    });
  });

  describe('a worker killed with SIGKILL', () => {
    beforeAll(() => {
      if (!existsSync(BUILT))
        throw new Error(`build the package first (npx tsc -b packages/postgres): ${BUILT} is missing`);
    });

    /** Runs the worker until its crash point, then SIGKILLs it and waits for it to be gone. */
    async function crashWorker(store: PostgresStore, messageId: string, crashPoint: string): Promise<string> {
      const child = spawn(
        process.execPath,
        [
          WORKER,
          JSON.stringify({
            connectionString,
            schema: store.schema,
            table: 'effects',
            consumer: 'crash',
            messageId,
            crashPoint,
          }),
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
      });
      const exited = new Promise<NodeJS.Signals | null>((resolve) =>
        child.on('exit', (_code, signal) => resolve(signal)),
      );
      const line = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`worker never reached ${crashPoint}: ${stderr}`)),
          30_000,
        );
        child.stdout.on('data', (chunk) => {
          stdout += chunk;
          const match = /^(CRASH_POINT.*|UNEXPECTED_END.*)$/m.exec(stdout);
          if (match) {
            clearTimeout(timer);
            resolve(match[1]!);
          }
        });
        child.on('exit', () => reject(new Error(`worker exited early: ${stdout} ${stderr}`)));
      });
      child.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');
      return line;
    }

    // Catches: a marker saved first in its own commit (the killed attempt would leave it,
    // and the redelivery would be skipped: a lost message).
    it('killed between the business insert and the commit: neither marker nor effect remains; the retry applies once', async () => {
      const store = await openStore();
      const table = await effectsTable(store);
      expect(await crashWorker(store, 'before-commit-1', 'before-commit')).toBe('CRASH_POINT');
      expect(await countRows(`${table} WHERE message_id = $1`, ['before-commit-1'])).toBe(0);
      expect(
        await countRows(`"${store.schema}".processed_messages WHERE message_id = $1`, ['before-commit-1']),
      ).toBe(0);
      // The dead backend's open transaction may still hold the row for a moment; the claim
      // waits for its rollback.
      const retry = await processOnce(
        store,
        { consumer: 'crash', messageId: 'before-commit-1' },
        async (tx) => {
          await tx.query(`INSERT INTO ${table} VALUES ($1)`, ['before-commit-1']);
        },
      );
      expect(retry.status).toBe('processed');
      expect(await countRows(`${table} WHERE message_id = $1`, ['before-commit-1'])).toBe(1);
    });

    // Catches: ack before commit, or a marker that does not survive the crash (the
    // redelivery would apply the effect a second time).
    it('killed after the commit, before the ack: marker and effect remain; the redelivery is a duplicate', async () => {
      const store = await openStore();
      const table = await effectsTable(store);
      expect(await crashWorker(store, 'after-commit-1', 'after-commit')).toBe('CRASH_POINT processed');
      expect(await countRows(`${table} WHERE message_id = $1`, ['after-commit-1'])).toBe(1);
      expect(
        await countRows(
          `"${store.schema}".processed_messages WHERE message_id = $1 AND status = 'completed'`,
          ['after-commit-1'],
        ),
      ).toBe(1);
      let ran = false;
      const redelivery = await processOnce(
        store,
        { consumer: 'crash', messageId: 'after-commit-1' },
        async (tx) => {
          ran = true;
          await tx.query(`INSERT INTO ${table} VALUES ($1)`, ['after-commit-1']);
        },
      );
      expect(redelivery).toEqual({ status: 'duplicate' });
      expect(ran).toBe(false);
      expect(await countRows(`${table} WHERE message_id = $1`, ['after-commit-1'])).toBe(1);
    });
  });

  describe('migrations', () => {
    // Catches: migrations re-applied (errors or duplicate rows) by a second or concurrent run.
    it('a second migrate() is a no-op and concurrent migrate() calls apply each migration once', async () => {
      const store = await openStore({ migrate: false });
      const others = [twin(store), twin(store), twin(store)];
      const results = await Promise.all([store, ...others].map((s) => s.migrate()));
      expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
      expect(results.flatMap((r) => r.applied)).toEqual(MIGRATIONS.map((m) => m.name));
      expect(await countRows(`"${store.schema}".migrations`)).toBe(MIGRATIONS.length);
      expect(await store.migrate()).toEqual({ applied: [], version: LATEST_VERSION });
      expect(await countRows(`"${store.schema}".migrations`)).toBe(MIGRATIONS.length);
    });

    // Catches: an older package running against a schema a newer one changed.
    it('refuses a schema migrated by a newer version of the package', async () => {
      const store = await openStore();
      await admin.query(
        `INSERT INTO "${store.schema}".migrations (version, name) VALUES (999, '0999_future')`,
      );
      const older = twin(store);
      const fromMigrate = await older.migrate().catch((e: unknown) => e);
      expect(fromMigrate).toBeInstanceOf(SchemaVersionError);
      expect(fromMigrate).toMatchObject({ found: 999, expected: LATEST_VERSION });
      expect((fromMigrate as Error).message).toMatch(/newer @oncely\/postgres/);
      const fresh = twin(store);
      const fromUse = await fresh.transaction(async () => 1).catch((e: unknown) => e);
      expect(fromUse).toBeInstanceOf(SchemaVersionError);
      expect(fresh.classifyError(fromUse)).toBe('unavailable');
      await expect(fresh.ping()).rejects.toBeInstanceOf(SchemaVersionError);
    });
  });

  describe('classifyError on real failures', () => {
    it('a unique violation from handler SQL is other', async () => {
      const store = await openStore();
      await admin.query(`CREATE TABLE "${store.schema}".uniq (id int PRIMARY KEY)`);
      const error = await store
        .transaction((tx) => tx.query(`INSERT INTO "${store.schema}".uniq VALUES (1), (1)`))
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: '23505' });
      expect(store.classifyError(error)).toBe('other');
    });

    // Also proves SET LOCAL lock_timeout is applied to every store transaction.
    it('a lock timeout is transient', async () => {
      // queryTimeoutMs only keeps a missing lock_timeout from hanging the test: the
      // statement then fails with the driver's timeout instead of 55P03.
      const store = await openStore({ lockTimeoutMs: 150, queryTimeoutMs: 30_000 });
      const { rows } = await store.transaction((tx) =>
        tx.query<{ lock_timeout: string }>('SHOW lock_timeout'),
      );
      expect(rows[0]!.lock_timeout).toBe('150ms');
      await admin.query(`CREATE TABLE "${store.schema}".locked (id int PRIMARY KEY)`);
      await admin.query(`INSERT INTO "${store.schema}".locked VALUES (1)`);
      const holder = await admin.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT * FROM "${store.schema}".locked WHERE id = 1 FOR UPDATE`);
        // 55P03 (lock_not_available) is what lock_timeout raises: the proof that it fired.
        // (A wall-clock bound of 4 s stood here; the code says more and needs no clock.)
        const error = await store
          .transaction((tx) => tx.query(`SELECT * FROM "${store.schema}".locked WHERE id = 1 FOR UPDATE`))
          .catch((e: unknown) => e);
        expect(error).toMatchObject({ code: '55P03' });
        expect(store.classifyError(error)).toBe('transient');
      } finally {
        await holder.query('ROLLBACK');
        holder.release();
      }
    });

    it('a connection refused on a closed port is unavailable', async () => {
      const port = await closedPort();
      const store = new PostgresStore({ connectionString: `postgres://postgres@127.0.0.1:${port}/test` });
      stores.push(store);
      const error = await store.transaction(async () => 1).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).cause).toMatchObject({ code: 'ECONNREFUSED' });
      expect(store.classifyError(error)).toBe('unavailable');
      expect(store.classifyError((error as Error).cause)).toBe('unavailable');
      const pingError = await store.ping().catch((e: unknown) => e);
      expect(store.classifyError(pingError)).toBe('unavailable');
    });

    it('a backend terminated during a query is unavailable', async () => {
      const store = await openStore();
      const running = deferred<number>();
      const outcome = store
        .transaction(async (tx) => {
          const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          running.resolve(rows[0]!.pid);
          await tx.query('SELECT pg_sleep(30)');
        })
        .catch((e: unknown) => e);
      const pid = await running.promise;
      await until(
        async () =>
          (await countRows(`pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%'`, [pid])) === 1,
        'the sleep to start',
      );
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      const error = await outcome;
      expect(isOncelyError(error, 'STORE_UNAVAILABLE') || (error as { code?: string }).code === '57P01').toBe(
        true,
      );
      expect(store.classifyError(error)).toBe('unavailable');
      // The broken client was discarded, not pooled: the store works again.
      expect(await store.transaction(async (tx) => (await tx.query('SELECT 1 AS one')).rows)).toEqual([
        { one: 1 },
      ]);
    });

    it('a backend terminated while its transaction is idle is unavailable (pg raises a code-less error)', async () => {
      const store = await openStore();
      const opened = deferred<number>();
      const proceed = deferred();
      const outcome = store
        .transaction(async (tx) => {
          const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          opened.resolve(rows[0]!.pid);
          await proceed.promise;
          await tx.query('SELECT 1');
        })
        .catch((e: unknown) => e);
      const pid = await opened.promise;
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      await until(
        async () => (await countRows('pg_stat_activity WHERE pid = $1', [pid])) === 0,
        'the backend to exit',
      );
      proceed.resolve();
      const error = await outcome;
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(store.classifyError(error)).toBe('unavailable');
      expect(await store.transaction(async (tx) => (await tx.query('SELECT 1 AS one')).rows)).toEqual([
        { one: 1 },
      ]);
    });

    // Catches: a pool without an 'error' listener, whose idle clients crash the process
    // when the database restarts; and transactions failing on pooled connections that
    // died while idle (the pool has not noticed yet) instead of trying a live one.
    it('idle pooled connections that die are logged and replaced, never crash the process', async () => {
      const warnings: string[] = [];
      const logger: Logger = { debug() {}, info() {}, error() {}, warn: (message) => warnings.push(message) };
      const appName = uniqueSchema('idle');
      const schema = uniqueSchema('server');
      schemas.push(schema);
      const store = new PostgresStore({
        connectionString: `${connectionString}?application_name=${appName}`,
        schema,
        poolMax: 3,
        logger,
      });
      stores.push(store);
      await store.migrate();
      /** Opens all three pooled connections, then kills their backends while they sit idle. */
      const killIdleConnections = async () => {
        await Promise.all([1, 2, 3].map(() => store.transaction((tx) => tx.query('SELECT pg_sleep(0.05)'))));
        const { rows } = await admin.query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
          [appName],
        );
        expect(rows).toHaveLength(3);
      };

      await killIdleConnections();
      await until(async () => warnings.length >= 3, 'an idle-connection warning per connection');
      expect(warnings[0]).toMatch(/idle PostgreSQL connection/);
      expect((await processOnce(store, { consumer: 'idle', messageId: 'after' }, async () => 1)).status).toBe(
        'processed',
      );

      // At once, while the pool may still hand out the dead connections.
      await killIdleConnections();
      expect(
        (await processOnce(store, { consumer: 'idle', messageId: 'at-once' }, async () => 1)).status,
      ).toBe('processed');
      await store.ping();
    });

    // Catches: an HTTP call refused inside a handler mistaken for a database outage (the
    // consumer would pause and retry the handler without counting attempts).
    it('a socket error from something else the handler called is other while the store connection is healthy', async () => {
      const store = await openStore();
      const apiDown = Object.assign(new Error('payment API refused the connection'), {
        code: 'ECONNREFUSED',
      });
      const error = await store
        .transaction(async (tx) => {
          await tx.query('SELECT 1');
          throw apiDown;
        })
        .catch((e: unknown) => e);
      expect(error).toBe(apiDown);
      expect(store.classifyError(error)).toBe('other');
    });
  });

  describe('ways to reach the database', () => {
    // Catches: a store that closes a pool it does not own, or leaves its listener on it.
    it('a caller-owned pool is used and left open', async () => {
      const pool = new pg.Pool({ connectionString, max: 2 });
      try {
        const listeners = pool.listenerCount('error');
        const schema = uniqueSchema('server');
        schemas.push(schema);
        const store = new PostgresStore({ pool, schema });
        expect(pool.listenerCount('error')).toBe(listeners + 1);
        await store.migrate();
        expect((await processOnce(store, { consumer: 'pool', messageId: 'm' }, async () => 1)).status).toBe(
          'processed',
        );
        await store.close();
        expect(pool.listenerCount('error')).toBe(listeners);
        expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      } finally {
        await pool.end();
      }
    });

    // Catches: a store that issues its own BEGIN/COMMIT in the caller's transaction, or
    // whose markers do not roll back with it.
    it("runs in the caller's own transaction; commit and rollback are the caller's", async () => {
      const schema = uniqueSchema('server');
      schemas.push(schema);
      const statements: string[] = [];
      const transaction = async <T>(work: (client: SqlClient) => Promise<T>): Promise<T> => {
        const client = await admin.connect();
        const recording: SqlClient = {
          query: (text, params) => {
            statements.push(text);
            return client.query(text, params as unknown[]) as never;
          },
        };
        try {
          await client.query('BEGIN');
          const result = await work(recording);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        } finally {
          client.release();
        }
      };
      const store = new PostgresStore({ transaction, schema });
      stores.push(store);
      await store.migrate();
      await admin.query(`CREATE TABLE "${schema}".effects (message_id text)`);
      const key = { consumer: 'caller', messageId: 'm-1' };
      await expect(
        processOnce(store, key, async (tx) => {
          await tx.query(`INSERT INTO "${schema}".effects VALUES ('m-1')`);
          throw new Error('roll back');
        }),
      ).rejects.toThrow('roll back');
      expect(await countRows(`"${schema}".processed_messages`)).toBe(0);
      expect((await processOnce(store, key, async () => 1)).status).toBe('processed');
      expect((await processOnce(store, key, async () => 1)).status).toBe('duplicate');
      expect(statements.some((s) => /^\s*(BEGIN|COMMIT|ROLLBACK)\b/i.test(s))).toBe(false);
      expect(statements).toContain('SET LOCAL lock_timeout = 5000');
    });
  });
});
