import { createHash } from 'node:crypto';
import http from 'node:http';
import { MySqlStore } from '@oncely/mysql';
import type { PostgresStore } from '@oncely/postgres';
import { requireService } from '@oncely/testkit';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import {
  gate,
  listen,
  openStore,
  admin as pgAdmin,
  post,
  postgresAvailable,
  startServer,
  uniqueSchema,
} from './support.js';

// A hostile reviewer's pass against the README's promises (see the report of branch `http`).
const mysqlUrl = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const admin = mysql.createPool({ uri: mysqlUrl, connectionLimit: 3 });
const hasMySql = await requireService('MariaDB', () => admin.query('DO 0'));
const hasPostgres = await postgresAvailable();
const silent = { debug() {}, info() {}, warn() {}, error() {} };

afterAll(async () => {
  await admin.end();
});

/** The name MySqlStore gives a key's GET_LOCK (src/httpKeys.ts of @oncely/mysql). */
function lockName(schema: string, scope: string, key: string): string {
  return `oncely_http:${createHash('sha256').update(`${schema}:${scope.length}:${scope}:${key}`).digest('base64url')}`;
}

async function lockIsFree(name: string): Promise<boolean> {
  const [rows] = await admin.query('SELECT IS_FREE_LOCK(?) AS free', [name]);
  return Number((rows as Array<{ free: number }>)[0]!.free) === 1;
}

describe.skipIf(!hasMySql)('hostile review on MySqlStore', () => {
  const schema = uniqueSchema('http_hostile_my');
  let store: MySqlStore;
  beforeAll(async () => {
    store = new MySqlStore({ url: mysqlUrl, schema, poolMax: 8 });
    await store.migrate();
    await admin.query(`CREATE TABLE \`${schema}\`.orders (id VARCHAR(64) PRIMARY KEY)`);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``);
  });

  it('the GET_LOCK of a key is released after a success, a 5xx (rerun) and a 504', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'locks', handlerTimeoutMs: 300, logger: silent });
    const slow = gate();
    const server = await startServer('node', idempotency, async ({ body }) => {
      if (body!.id === 'slow') await slow.wait;
      return { status: body!.id === 'boom' ? 500 : 201, body: {} };
    });
    try {
      for (const id of ['ok', 'boom', 'slow']) {
        const response = await post(server.url, { id }, { 'idempotency-key': `lock-${id}` });
        expect(response.status).toBe(id === 'ok' ? 201 : id === 'boom' ? 500 : 504);
        await expect.poll(() => lockIsFree(lockName(schema, 'locks', `lock-${id}`))).toBe(true);
      }
    } finally {
      slow.open();
      await server.close();
    }
  });

  it("failures: 'store' with a caught SQL error answers 500, commits nothing, and stores nothing", async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'caught', failures: 'store', logger: silent });
    let runs = 0;
    const server = await startServer('express', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO \`${schema}\`.orders (id) VALUES (?)`, [`caught-${runs}`]);
      if (runs === 1) await tx!.query('SELECT * FROM no_such_table').catch(() => {});
      return { status: 201, body: { runs } };
    });
    try {
      const first = await post(server.url, { id: 'c' }, { 'idempotency-key': 'caught' });
      expect(first.status).toBe(500);
      const [rows] = await admin.query(`SELECT id FROM \`${schema}\`.orders WHERE id LIKE 'caught-%'`);
      expect(rows).toEqual([]);
      const retry = await post(server.url, { id: 'c' }, { 'idempotency-key': 'caught' });
      expect(retry.status).toBe(201);
      expect(runs).toBe(2);
    } finally {
      await server.close();
    }
  });

  it('a scope longer than the column (1024 bytes) answers a 500 problem at once, unrun, logged with the limit', async () => {
    const errors: unknown[] = [];
    const idempotency = new HttpIdempotency({
      store,
      scope: () => 's'.repeat(1025),
      logger: {
        ...silent,
        error: (_m: string, fields?: Record<string, unknown>) => void errors.push(fields?.error),
      },
    });
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      return { status: 201, body: {} };
    });
    try {
      const response = await post(server.url, { id: 'x' }, { 'idempotency-key': 'long-scope' });
      expect(response.status).toBeGreaterThanOrEqual(500);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(runs).toBe(0);
      expect(String((errors[0] as Error)?.message)).toMatch(/at most 1024 bytes/);
    } finally {
      await server.close();
    }
  });

  it('a pool exhausted by held handlers: another key is answered 503 within poolWaitTimeoutMs, never hangs', async () => {
    const small = new MySqlStore({ url: mysqlUrl, schema, poolMax: 1, poolWaitTimeoutMs: 500 });
    const idempotency = new HttpIdempotency({
      store: small,
      scope: 'pool',
      logger: silent,
      handlerTimeoutMs: 20_000,
    });
    const held = gate();
    const server = await startServer('fastify', idempotency, async ({ body }) => {
      if (body!.id === 'holder') {
        held.enter();
        await held.wait;
      }
      return { status: 201, body: {} };
    });
    try {
      const holder = post(server.url, { id: 'holder' }, { 'idempotency-key': 'pool-holder' });
      await held.entered;
      const other = await post(server.url, { id: 'other' }, { 'idempotency-key': 'pool-other' });
      expect(other.status).toBe(503);
      expect(other.headers.get('retry-after')).toBe('1');
      held.open();
      expect((await holder).status).toBe(201);
      expect((await post(server.url, { id: 'other' }, { 'idempotency-key': 'pool-other' })).status).toBe(201);
    } finally {
      held.open();
      await server.close();
      await small.close();
    }
  });

  it.each(['transactional', 'leased'] as const)(
    '%s under load: 200 distinct keys at once on a pool of 4 all commit once, none hang or deadlock',
    async (mode) => {
      // A 45 s wait for a connection: leased mode takes about three checkouts a request, 600
      // checkouts on 4 connections, which a loaded machine stretched towards the default 10 s
      // (a waiter's clock runs on through a stall). A deadlock still fails on the test's bound.
      const small = new MySqlStore({ url: mysqlUrl, schema, poolMax: 4, poolWaitTimeoutMs: 45_000 });
      const idempotency = new HttpIdempotency({ store: small, mode, scope: `load-${mode}`, logger: silent });
      const server = await startServer('node', idempotency, async ({ tx, body }) => {
        const insert = `INSERT INTO \`${schema}\`.orders (id) VALUES (?)`;
        if (tx) await tx.query(insert, [body!.id]);
        else await small.transaction((own) => own.query(insert, [body!.id]));
        return { status: 201, body: { id: body!.id } };
      });
      try {
        const ids = Array.from({ length: 200 }, (_, i) => `load-${mode}-${i}`);
        const statuses = await Promise.all(
          ids.map((id) => post(server.url, { id }, { 'idempotency-key': id }).then((r) => r.status)),
        );
        expect(statuses.filter((status) => status !== 201)).toEqual([]);
        const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM \`${schema}\`.orders WHERE id LIKE ?`, [
          `load-${mode}-%`,
        ]);
        expect(Number((rows as Array<{ n: number }>)[0]!.n)).toBe(200);
      } finally {
        await server.close();
        await small.close();
      }
    },
  );

  it('a header with several values (Link) is replayed with all of them, in order', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'links' });
    const server = await listen(
      http.createServer(
        idempotency.handler((_req, res) => {
          res.setHeader('link', ['</a>; rel="a"', '</b>; rel="b"']);
          res.writeHead(201, { 'content-type': 'text/plain; charset=utf-8' }).end('é ✓');
        }),
      ),
    );
    try {
      const first = await post(server.url, {}, { 'idempotency-key': 'links' });
      const replay = await post(server.url, {}, { 'idempotency-key': 'links' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('link')).toBe(first.headers.get('link'));
      expect(replay.headers.get('link')).toBe('</a>; rel="a", </b>; rel="b"');
      expect(await replay.text()).toBe('é ✓');
    } finally {
      await server.close();
    }
  });

  it('a handler stuck in a slow statement still gets its 504 at handlerTimeoutMs; its writes roll back', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'stuck', handlerTimeoutMs: 500, logger: silent });
    let runs = 0;
    let statementEnded = false;
    const server = await startServer('express', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO \`${schema}\`.orders (id) VALUES (?)`, [`stuck-${runs}`]);
      if (runs === 1) {
        await tx!.query('DO SLEEP(6)').finally(() => {
          statementEnded = true;
        });
      }
      return { status: 201, body: { runs } };
    });
    try {
      const first = await post(server.url, { id: 's' }, { 'idempotency-key': 'stuck' });
      expect(first.status).toBe(504);
      // Answered while the statement still runs: the answer does not wait for the rollback
      // (which queues behind the statement on its connection).
      expect(statementEnded).toBe(false);
      await expect
        .poll(async () => (await post(server.url, { id: 's' }, { 'idempotency-key': 'stuck' })).status, {
          timeout: 20_000,
          interval: 250,
        })
        .toBe(201);
      const [rows] = await admin.query(`SELECT id FROM \`${schema}\`.orders WHERE id LIKE 'stuck-%'`);
      expect((rows as Array<{ id: string }>).map((row) => row.id)).toEqual([`stuck-${runs}`]);
    } finally {
      await server.close();
    }
  });

  it("leased mode on a MySqlStore running in the caller's own transactions: runs once, replays, 409 while running", async () => {
    const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 4 });
    const own = new MySqlStore({
      schema,
      transaction: async (work) => {
        const connection = await pool.getConnection();
        try {
          await connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
          await connection.query('START TRANSACTION');
          const result = await work({
            query: async (text: string, params?: readonly unknown[]) => {
              const [answer] = await connection.query(text, params as unknown[]);
              return Array.isArray(answer)
                ? { rows: answer as never[], rowCount: answer.length }
                : { rows: [], rowCount: (answer as { affectedRows: number }).affectedRows };
            },
          });
          await connection.query('COMMIT');
          return result;
        } catch (error) {
          await connection.query('ROLLBACK').catch(() => {});
          throw error;
        } finally {
          connection.release();
        }
      },
    });
    const idempotency = new HttpIdempotency({ store: own, mode: 'leased', scope: 'caller', logger: silent });
    const held = gate();
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      held.enter();
      await held.wait;
      return { status: 201, body: { runs } };
    });
    try {
      const first = post(server.url, { id: 'c' }, { 'idempotency-key': 'caller' });
      await held.entered;
      expect((await post(server.url, { id: 'c' }, { 'idempotency-key': 'caller' })).status).toBe(409);
      held.open();
      expect((await first).status).toBe(201);
      const replay = await post(server.url, { id: 'c' }, { 'idempotency-key': 'caller' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(runs).toBe(1);
    } finally {
      held.open();
      await server.close();
      await pool.end();
    }
  });

  it('a 204 (no body) is replayed as a 204 with an empty body', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'nobody' });
    let runs = 0;
    const server = await listen(
      http.createServer(
        idempotency.handler((_req, res) => {
          runs++;
          res.writeHead(204).end();
        }),
      ),
    );
    try {
      const first = await post(server.url, {}, { 'idempotency-key': 'nobody' });
      const replay = await post(server.url, {}, { 'idempotency-key': 'nobody' });
      expect([first.status, replay.status]).toEqual([204, 204]);
      expect(await replay.text()).toBe('');
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(runs).toBe(1);
    } finally {
      await server.close();
    }
  });
});

describe.skipIf(!hasPostgres)('hostile review on PostgresStore', () => {
  const schema = uniqueSchema('http_hostile_pg');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await pgAdmin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  it('a pool exhausted by a held handler: another key is answered 503 within connectTimeoutMs, not after the holder', async () => {
    const { PostgresStore } = await import('@oncely/postgres');
    const connectionString = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
    const small = new PostgresStore({ connectionString, schema, poolMax: 1, connectTimeoutMs: 1000 });
    const idempotency = new HttpIdempotency({
      store: small,
      scope: 'pool',
      logger: silent,
      handlerTimeoutMs: 30_000,
    });
    const held = gate();
    const server = await startServer('express', idempotency, async ({ body }) => {
      if (body!.id === 'holder') {
        held.enter();
        await held.wait;
      }
      return { status: 201, body: {} };
    });
    try {
      const holder = post(server.url, { id: 'holder' }, { 'idempotency-key': 'pg-pool-holder' });
      await held.entered;
      const other = await Promise.race([
        post(server.url, { id: 'other' }, { 'idempotency-key': 'pg-pool-other' }).then((r) => r.status),
        new Promise<string>((resolve) => setTimeout(() => resolve('no answer in 15 s'), 15_000).unref()),
      ]);
      expect(other).toBe(503);
      held.open();
      expect((await holder).status).toBe(201);
    } finally {
      held.open();
      await server.close();
      await small.close();
    }
  });

  it('a handler stuck in a slow statement still gets its 504 at handlerTimeoutMs; its writes roll back', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'stuck', handlerTimeoutMs: 500, logger: silent });
    let runs = 0;
    let statementEnded = false;
    const server = await startServer('node', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [`stuck-${runs}`]);
      if (runs === 1) {
        await tx!.query('SELECT pg_sleep(6)').finally(() => {
          statementEnded = true;
        });
      }
      return { status: 201, body: { runs } };
    });
    try {
      const first = await post(server.url, { id: 's' }, { 'idempotency-key': 'stuck' });
      expect(first.status).toBe(504);
      // Answered while the statement still runs: the answer does not wait for the rollback
      // (which queues behind the statement on its connection).
      expect(statementEnded).toBe(false);
      await expect
        .poll(async () => (await post(server.url, { id: 's' }, { 'idempotency-key': 'stuck' })).status, {
          timeout: 20_000,
          interval: 250,
        })
        .toBe(201);
      const { rows } = await pgAdmin.query(`SELECT id FROM "${schema}".orders WHERE id LIKE 'stuck-%'`);
      expect(rows.map((row: { id: string }) => row.id)).toEqual([`stuck-${runs}`]);
    } finally {
      await server.close();
    }
  });

  it('the same JSON with its keys in another order is the same request: a replay, not a 422', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'order' });
    let runs = 0;
    const server = await startServer('express', idempotency, async () => {
      runs++;
      return { status: 201, body: { runs } };
    });
    try {
      const send = (text: string) =>
        fetch(`${server.url}/orders`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': 'order' },
          body: text,
        });
      expect((await send('{"a":1,"b":{"c":2,"d":3}}')).status).toBe(201);
      const reordered = await send('{"b":{"d":3,"c":2},"a":1}');
      expect(reordered.status).toBe(201);
      expect(reordered.headers.get('idempotent-replayed')).toBe('true');
      expect(runs).toBe(1);
    } finally {
      await server.close();
    }
  });

  it('Set-Cookie of the first response is not replayed to whoever retries (not a stored header)', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'cookie' });
    const server = await listen(
      http.createServer(
        idempotency.handler((_req, res) => {
          res.writeHead(201, { 'set-cookie': 'session=secret', 'content-type': 'text/plain' }).end('ok');
        }),
      ),
    );
    try {
      const first = await post(server.url, {}, { 'idempotency-key': 'cookie' });
      expect(first.headers.get('set-cookie')).toBe('session=secret');
      const replay = await post(server.url, {}, { 'idempotency-key': 'cookie' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('set-cookie')).toBeNull();
    } finally {
      await server.close();
    }
  });

  it('an empty key, a key over maxKeyLength and a key with a control character are 400, unrun', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'bad' });
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      return { status: 201, body: {} };
    });
    try {
      for (const key of ['""', 'k'.repeat(256), '"a\tb"']) {
        const response = await post(server.url, {}, { 'idempotency-key': key });
        expect(response.status).toBe(400);
      }
      expect((await post(server.url, {}, { 'idempotency-key': 'k'.repeat(255) })).status).toBe(201);
      expect(runs).toBe(1);
    } finally {
      await server.close();
    }
  });
});
