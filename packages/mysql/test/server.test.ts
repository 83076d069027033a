/**
 * The hostile pass on the real MariaDB: connections cut mid-run and a silent partition
 * (through the testkit's TCP proxy: the shared server itself is never restarted),
 * a deadlock swallowed by a handler, DDL inside a handler, keys MySQL's collations would
 * merge, bad URLs and pools, and a schema newer than the code.
 */
import { isOncelyError, processOnce, StoreUnavailableError } from '@oncely/core';
import { TcpProxy } from '@oncely/testkit';
import mysql from 'mysql2';
import { afterAll, describe, expect, it } from 'vitest';
import {
  KeyTooLongError,
  MYSQL_LATEST_VERSION,
  MySqlStore,
  MySqlTransactionAbortedError,
  MySqlTransactionEndedError,
} from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

const schemas: string[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers) await close().catch(() => {});
  for (const schema of schemas) await dropSchema(schema);
  await admin.end();
});

async function migrated(options: { url?: string; queryTimeoutMs?: number } = {}) {
  const schema = uniqueSchema('hostile');
  schemas.push(schema);
  const store = new MySqlStore({ url: options.url ?? mysqlUrl, schema, ...options });
  closers.push(() => store.close());
  await new MySqlStore({ url: mysqlUrl, schema }).migrate();
  await admin.query(`CREATE TABLE \`${schema}\`.effects (id VARCHAR(64) NOT NULL)`);
  return { store, schema, effects: `\`${schema}\`.effects` };
}

async function effectRows(table: string): Promise<number> {
  const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM ${table}`);
  return Number((rows as Array<{ n: number }>)[0]!.n);
}

function proxyUrl(port: number): string {
  const url = new URL(mysqlUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return url.href;
}

describe.skipIf(!hasMySql)('MySqlStore on the real MariaDB: the hostile pass', () => {
  it('connections cut mid-run: the store reports itself unavailable, then recovers with fresh connections', async () => {
    const target = new URL(mysqlUrl);
    const proxy = new TcpProxy({ host: target.hostname, port: Number(target.port || 3306) });
    const port = await proxy.start();
    closers.push(() => proxy.close());
    const { store, effects } = await migrated({ url: proxyUrl(port) });
    const key = (id: string) => ({ consumer: 'cut', messageId: id });
    expect(
      (
        await processOnce(store, key('before'), (tx) =>
          tx.query(`INSERT INTO ${effects} VALUES (?)`, ['before']),
        )
      ).status,
    ).toBe('processed');
    // Cut while a transaction is open (its marker inserted, its commit not sent).
    const inFlight = processOnce(store, key('during'), async (tx) => {
      await tx.query(`INSERT INTO ${effects} VALUES (?)`, ['during']);
      await proxy.cut();
      await tx.query('DO 0');
    });
    const error = await inFlight.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(store.classifyError(error)).toBe('unavailable');
    // While cut: ping fails as unavailable (connecting is refused).
    const pinged = await store.ping().catch((e: unknown) => e);
    expect(store.classifyError(pinged)).toBe('unavailable');
    await proxy.resume();
    // The pooled connections died with the cut; the next call gets a fresh one.
    expect(
      (
        await processOnce(store, key('during'), (tx) =>
          tx.query(`INSERT INTO ${effects} VALUES (?)`, ['during']),
        )
      ).status,
    ).toBe('processed');
    expect(await effectRows(effects)).toBe(2);
  });

  it('a silent partition becomes an outage after queryTimeoutMs, not a hang', async () => {
    const target = new URL(mysqlUrl);
    const proxy = new TcpProxy({ host: target.hostname, port: Number(target.port || 3306) });
    const port = await proxy.start();
    closers.push(() => proxy.close());
    const { store } = await migrated({ url: proxyUrl(port), queryTimeoutMs: 500 });
    await store.ping();
    proxy.stall();
    const error = await processOnce(store, { consumer: 'stall', messageId: 'm' }, async () => {}).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toMatch(/did not answer within 500 ms \(queryTimeoutMs\)/);
    proxy.unstall();
    expect((await processOnce(store, { consumer: 'stall', messageId: 'm' }, async () => {})).status).toBe(
      'processed',
    );
  });

  it('a deadlock the handler swallows: MySQL rolled everything back; later statements and the commit are refused, nothing lands', async () => {
    const { store, schema, effects } = await migrated();
    const rows = `\`${schema}\`.rows_`;
    await admin.query(`CREATE TABLE ${rows} (id INT PRIMARY KEY, v INT)`);
    await admin.query(
      `INSERT INTO ${rows} VALUES ${Array.from({ length: 50 }, (_, i) => `(${i + 1}, 0)`).join(', ')}`,
    );
    /**
     * `other` changes rows 2..50, `work` row 1; then each waits for the other's row. InnoDB
     * rolls back the transaction that changed fewer rows: `work`'s, every time.
     */
    const deadlock = async (work: (sql: string) => Promise<unknown>, after: () => Promise<unknown>) => {
      const other = await admin.getConnection();
      try {
        await other.query('START TRANSACTION');
        await other.query(`UPDATE ${rows} SET v = 1 WHERE id >= 2`);
        await work(`UPDATE ${rows} SET v = 1 WHERE id = 1`);
        const otherWaits = other.query(`UPDATE ${rows} SET v = 2 WHERE id = 1`).catch((e: unknown) => e);
        let victim: unknown;
        try {
          await work(`UPDATE ${rows} SET v = 2 WHERE id = 2`);
        } catch (error) {
          victim = error; // the handler's mistake: it carries on
          await after().catch(() => {});
        }
        await otherWaits;
        await other.query('ROLLBACK');
        return victim;
      } finally {
        other.release();
      }
    };

    // Why the store refuses: on a plain mysql2 connection the INSERT after the deadlock runs
    // in autocommit (the transaction is gone) and stays, with nothing around it.
    const raw = await admin.getConnection();
    await raw.query('START TRANSACTION');
    const rawVictim = await deadlock(
      (sql) => raw.query(sql),
      () => raw.query(`INSERT INTO ${effects} VALUES (?)`, ['raw-after-deadlock']),
    );
    await raw.query('ROLLBACK');
    raw.release();
    expect((rawVictim as { errno?: number }).errno).toBe(1213);
    expect(await effectRows(effects)).toBe(1);

    let runs = 0;
    let victim: unknown;
    const outcome = await processOnce(store, { consumer: 'deadlock', messageId: 'm' }, async (tx) => {
      if (++runs > 1) return; // the retry after the transient failure
      victim = await deadlock(
        (sql) => tx.query(sql),
        () => tx.query(`INSERT INTO ${effects} VALUES (?)`, ['store-after-deadlock']),
      );
    });
    expect((victim as { errno?: number }).errno).toBe(1213);
    // The swallowed deadlock failed the first run (transient: retried at once, not counted).
    expect(runs).toBe(2);
    expect(outcome).toEqual({ status: 'processed', result: undefined });
    const [found] = await admin.query(`SELECT id FROM ${effects}`);
    expect((found as Array<{ id: string }>).map((row) => row.id)).toEqual(['raw-after-deadlock']);
  });

  it('a caught statement error outside ctx.savepoint fails the attempt; inside one it does not', async () => {
    const { store, effects } = await migrated();
    const failure = await processOnce(store, { consumer: 'swallow', messageId: 'm' }, async (tx) => {
      await tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m']);
      await tx.query('SELECT * FROM no_such_table_here').catch(() => {});
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(MySqlTransactionAbortedError);
    expect(((failure as Error).cause as { errno?: number }).errno).toBe(1146);
    expect(store.classifyError(failure)).toBe('other');
    expect(await effectRows(effects)).toBe(0);
    const ok = await processOnce(store, { consumer: 'swallow', messageId: 'm' }, async (tx) => {
      await store.savepoint(tx, () => tx.query('SELECT * FROM no_such_table_here')).catch(() => {});
      await tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m']);
    });
    expect(ok.status).toBe('processed');
    expect(await effectRows(effects)).toBe(1);
  });

  it('DDL inside a handler (an implicit commit) fails the attempt loudly; later statements are refused', async () => {
    const { store, schema, effects } = await migrated();
    let after: unknown;
    const failure = await processOnce(store, { consumer: 'ddl', messageId: 'm' }, async (tx) => {
      await tx.query(`CREATE TABLE \`${schema}\`.made_in_handler (a INT)`);
      after = await tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m']).catch((e: unknown) => e);
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(MySqlTransactionAbortedError);
    expect((failure as Error).message).toMatch(/DDL commits implicitly/);
    expect(after).toBeInstanceOf(MySqlTransactionAbortedError);
    expect(await effectRows(effects)).toBe(0);
  });

  it('a statement after the transaction ended is refused', async () => {
    const { store } = await migrated();
    let kept: { query(text: string): Promise<unknown> } | undefined;
    await store.transaction(async (tx) => {
      kept = tx;
    });
    await expect(kept!.query('DO 0')).rejects.toBeInstanceOf(MySqlTransactionEndedError);
  });

  it('keys are compared byte by byte: case, trailing spaces and accents are different messages; an over-long key is refused', async () => {
    const { store } = await migrated();
    const ids = ['order-1', 'Order-1', 'order-1 ', 'ordér-1', 'order-1\u0000'];
    const claimed = await store.transaction((tx) => store.claim(tx, 'bytes', ids));
    expect([...claimed].sort()).toEqual([...ids].sort());
    for (const id of ids) {
      expect((await processOnce(store, { consumer: 'bytes', messageId: id }, async () => {})).status).toBe(
        'duplicate',
      );
    }
    const long = 'x'.repeat(2049);
    const error = await processOnce(store, { consumer: 'bytes', messageId: long }, async () => {}).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(KeyTooLongError);
  });

  it('bad URLs and pools are clear errors; the password never appears in one', async () => {
    expect(() => new MySqlStore({ url: 'postgres://db/x' })).toThrow(
      /url must start with mysql:\/\/ or mariadb:\/\//,
    );
    expect(() => new MySqlStore({ url: 'not a url' })).toThrow(/url must be a URL/);
    expect(() => new MySqlStore({ url: '' })).toThrow(/url must be a non-empty string/);
    expect(() => new MySqlStore({ pool: {} as never })).toThrow(/pool must be a mysql2 pool/);
    expect(() => new MySqlStore({ url: mysqlUrl, pool: {} as never } as never)).toThrow(
      /exactly one of url, pool or transaction/,
    );
    expect(() => new MySqlStore({ url: mysqlUrl, schema: 'a`b' })).toThrow(
      /schema must be a plain SQL identifier/,
    );
    expect(() => new MySqlStore({ url: mysqlUrl, schema: 'mysql' })).toThrow(/must not be a system database/);
    const refused = new MySqlStore({ url: 'mysql://app:s3cret@127.0.0.1:1/x', connectTimeoutMs: 2000 });
    const error = await refused.ping().catch((e: unknown) => e);
    await refused.close();
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toContain('mysql://app:***@127.0.0.1:1/x');
    expect((error as Error).message).not.toContain('s3cret');
    // mariadb:// is the same protocol; a callback pool is taken through its .promise().
    const schema = uniqueSchema('urls');
    schemas.push(schema);
    const viaMariadb = new MySqlStore({ url: mysqlUrl.replace(/^mysql:/, 'mariadb:'), schema });
    await viaMariadb.migrate();
    await viaMariadb.close();
    const callbackPool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 2 });
    const viaPool = new MySqlStore({ pool: callbackPool, schema });
    expect((await processOnce(viaPool, { consumer: 'p', messageId: 'm' }, async () => {})).status).toBe(
      'processed',
    );
    await viaPool.close();
    await new Promise((resolve) => callbackPool.end(resolve));
  });

  it('prune skips a marker another transaction holds (SKIP LOCKED) instead of waiting for it, and claims go on meanwhile', async () => {
    const { store, schema } = await migrated();
    const ids = Array.from({ length: 30 }, (_, i) => `old-${i}`);
    await store.transaction((tx) => store.claim(tx, 'pruned', ids));
    const holder = await admin.getConnection();
    try {
      await holder.query('START TRANSACTION');
      await holder.query(
        `SELECT 1 FROM \`${schema}\`.processed_messages WHERE consumer = 'pruned' AND message_id = 'old-7' FOR UPDATE`,
      );
      const future = new Date(Date.now() + 3_600_000);
      // A claim while the row is held and prune runs: neither waits for the other.
      const [deleted, claimed] = await Promise.all([
        store.prune({ olderThan: future, batchSize: 7, consumer: 'pruned' }),
        store.transaction((tx) => store.claim(tx, 'pruned', ['new-1'])),
      ]);
      expect(deleted).toBeGreaterThanOrEqual(29);
      expect([...claimed]).toEqual(['new-1']);
      await holder.query('ROLLBACK');
      // The held marker survived this prune; the next one takes it.
      const [rows] = await admin.query(
        `SELECT CAST(message_id AS CHAR) AS id FROM \`${schema}\`.processed_messages WHERE consumer = 'pruned' AND message_id LIKE 'old-%'`,
      );
      expect((rows as Array<{ id: string }>).map((row) => row.id)).toEqual(['old-7']);
    } finally {
      holder.release();
    }
  });

  it('a schema migrated by a newer version: migrate() refuses it, the store fails closed', async () => {
    const { store, schema } = await migrated();
    await admin.query(
      `INSERT INTO \`${schema}\`.oncely_migrations (version, name, applied_at) VALUES (99, '0099_future', UTC_TIMESTAMP(6))`,
    );
    const fresh = new MySqlStore({ url: mysqlUrl, schema });
    closers.push(() => fresh.close());
    const migrateError = await fresh.migrate().catch((e: unknown) => e);
    expect(isOncelyError(migrateError, 'SCHEMA_TOO_NEW')).toBe(true);
    expect((migrateError as Error).message).toMatch(/migrated to version 99 by a newer @oncely\/mysql/);
    const pingError = await fresh.ping().catch((e: unknown) => e);
    expect(isOncelyError(pingError, 'SCHEMA_TOO_NEW')).toBe(true);
    expect(fresh.classifyError(pingError)).toBe('unavailable');
    void store;
  });

  it('a database at version 1 (before the HTTP keys table): the store refuses it until migrate() applies 0002 alone', async () => {
    const { schema } = await migrated();
    await admin.query(`DROP TABLE \`${schema}\`.http_idempotency_keys`);
    await admin.query(`DELETE FROM \`${schema}\`.oncely_migrations WHERE version = 2`);
    const older = new MySqlStore({ url: mysqlUrl, schema });
    closers.push(() => older.close());
    const pingError = await older.ping().catch((e: unknown) => e);
    expect(isOncelyError(pingError, 'SCHEMA_NOT_MIGRATED')).toBe(true);
    expect(await older.migrate()).toEqual({
      applied: ['0002_http_idempotency_keys'],
      version: MYSQL_LATEST_VERSION,
    });
    await older.ping();
    const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM \`${schema}\`.http_idempotency_keys`);
    expect(Number((rows as Array<{ n: number }>)[0]!.n)).toBe(0);
  });

  it('deadLetterLog: completed markers among IDs (byte-exact keys), discard records read back in order', async () => {
    const { store } = await migrated();
    await processOnce(store, { consumer: 'payments', messageId: 'Order-1' }, async () => {});
    expect([...(await store.deadLetterLog.processed('payments', ['Order-1', 'order-1', 'x']))]).toEqual([
      'Order-1',
    ]);
    const at = new Date('2026-01-02T03:04:05.678Z');
    await store.deadLetterLog.recordDiscards([
      {
        consumer: 'payments',
        messageId: 'bad-1',
        reason: 'invalid-body',
        error: 'Unexpected token',
        discardedBy: 'alice',
        discardedAt: at,
      },
      { consumer: 'payments', reason: 'missing-id', discardedBy: 'alice', discardedAt: at },
      {
        consumer: 'payments',
        messageId: 'bad-1',
        reason: 'invalid-body',
        discardedBy: 'bob',
        discardedAt: at,
      },
    ]);
    expect(await store.deadLetterLog.discards('payments', 'bad-1')).toEqual([
      {
        consumer: 'payments',
        messageId: 'bad-1',
        reason: 'invalid-body',
        error: 'Unexpected token',
        discardedBy: 'alice',
        discardedAt: at,
      },
      {
        consumer: 'payments',
        messageId: 'bad-1',
        reason: 'invalid-body',
        discardedBy: 'bob',
        discardedAt: at,
      },
    ]);
    expect(await store.deadLetterLog.discards('payments', 'BAD-1')).toEqual([]);
  });

  it('an unmigrated database fails closed with SCHEMA_NOT_MIGRATED', async () => {
    const schema = uniqueSchema('unmigrated');
    const store = new MySqlStore({ url: mysqlUrl, schema });
    closers.push(() => store.close());
    const error = await processOnce(store, { consumer: 'c', messageId: 'm' }, async () => {}).catch(
      (e: unknown) => e,
    );
    expect(isOncelyError(error, 'SCHEMA_NOT_MIGRATED')).toBe(true);
    expect(store.classifyError(error)).toBe('unavailable');
  });
});
