import http from 'node:http';
import { MySqlStore } from '@oncely/mysql';
import { requireService } from '@oncely/testkit';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import type { Framework } from './support.js';
import { gate, listen, post, startServer, uniqueSchema } from './support.js';

// The core scenarios of middleware.test.ts against the real MariaDB through MySqlStore: the
// handlers write with `?` placeholders (mysql2's), everything else is the same contract.
const mysqlUrl = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const admin = mysql.createPool({ uri: mysqlUrl, connectionLimit: 3 });
const hasMySql = await requireService('MariaDB', () => admin.query('DO 0'));
const silent = { debug() {}, info() {}, warn() {}, error() {} };
const frameworks: Framework[] = ['node', 'express', 'fastify'];

async function openMySqlStore(schema: string, options: { poolMax?: number } = {}): Promise<MySqlStore> {
  const store = new MySqlStore({ url: mysqlUrl, schema, poolMax: options.poolMax ?? 24 });
  await store.migrate();
  await admin.query(
    `CREATE TABLE IF NOT EXISTS \`${schema}\`.orders (id VARCHAR(64) PRIMARY KEY, amount INT NULL)`,
  );
  return store;
}

async function orderIds(schema: string): Promise<string[]> {
  const [rows] = await admin.query(`SELECT id FROM \`${schema}\`.orders ORDER BY id`);
  return (rows as Array<{ id: string }>).map((row) => row.id);
}

afterAll(async () => {
  await admin.end();
});

describe('@oncely/http on MySqlStore: what it refuses up front', () => {
  it("a caller's own transaction: transactional mode is refused (its GET_LOCK outlives the commit), leased mode is taken", () => {
    const store = new MySqlStore({
      transaction: async (work) => work({ query: async () => ({ rows: [], rowCount: 0 }) }),
    });
    expect(() => new HttpIdempotency({ store, scope: 'tests' })).toThrow(/use mode 'leased'/);
    expect(new HttpIdempotency({ store, scope: 'tests', mode: 'leased' }).mode).toBe('leased');
  });

  it('a maxKeyLength the keys table cannot hold (over 1024 bytes) is refused up front, not a 500 per request', () => {
    const store = new MySqlStore({ url: mysqlUrl, schema: 'oncely' });
    expect(() => new HttpIdempotency({ store, scope: 'tests', maxKeyLength: 2000 })).toThrow(
      /maxKeyLength .*at most 1024/,
    );
    expect(new HttpIdempotency({ store, scope: 'tests', maxKeyLength: 1024 }).mode).toBe('transactional');
  });

  it("another schema than the store's database is refused (the table is one of its migrations)", () => {
    const store = new MySqlStore({ url: mysqlUrl, schema: 'oncely' });
    expect(() => new HttpIdempotency({ store, scope: 'tests', schema: 'elsewhere' })).toThrow(
      /keeps HTTP idempotency keys in its own database/,
    );
  });
});

describe.skipIf(!hasMySql)('@oncely/http on MySqlStore (the real MariaDB)', () => {
  const schema = uniqueSchema('http_my');
  let store: MySqlStore;
  beforeAll(async () => {
    store = await openMySqlStore(schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``);
  });

  describe.each(frameworks)('%s', (framework) => {
    it.each(['transactional', 'leased'] as const)(
      '%s: 20 identical requests at once run the handler once: 1x201, 19x409 with Retry-After, then replays',
      async (mode) => {
        const idempotency = new HttpIdempotency({ store, mode, scope: 'tests', logger: silent });
        const leader = gate();
        let runs = 0;
        const key = `burst-${framework}-${mode}`;
        const server = await startServer(framework, idempotency, async ({ tx, body }) => {
          runs++;
          leader.enter();
          await leader.wait;
          const insert = `INSERT INTO \`${schema}\`.orders (id) VALUES (?)`;
          if (tx) await tx.query(insert, [body!.id]);
          else await store.transaction((own) => own.query(insert, [body!.id]));
          return { status: 201, body: { id: body!.id } };
        });
        try {
          let refused = 0;
          const responses = Array.from({ length: 20 }, () =>
            post(server.url, { id: key }, { 'idempotency-key': key }).then(async (response) => {
              const text = await response.text();
              // The handler is held until every other request has been answered.
              if (response.status !== 201 && ++refused === 19) leader.open();
              return { status: response.status, retryAfter: response.headers.get('retry-after'), text };
            }),
          );
          const settled = await Promise.all(responses);
          leader.open();
          const statuses = settled.map((r) => r.status).sort();
          expect(statuses).toEqual([201, ...Array.from({ length: 19 }, () => 409)]);
          expect(settled.filter((r) => r.status === 409).every((r) => r.retryAfter === '1')).toBe(true);
          expect(runs).toBe(1);
          const replay = await post(server.url, { id: key }, { 'idempotency-key': key });
          expect(replay.status).toBe(201);
          expect(replay.headers.get('idempotent-replayed')).toBe('true');
          expect(runs).toBe(1);
          expect((await orderIds(schema)).filter((id) => id === key)).toEqual([key]);
        } finally {
          leader.open();
          await server.close();
        }
      },
    );
  });

  it.each(['transactional', 'leased'] as const)(
    '%s: replays status, body, content-type, location and etag byte for byte',
    async (mode) => {
      const idempotency = new HttpIdempotency({ store, mode, scope: 'tests' });
      let runs = 0;
      // Binary body bytes that are not valid UTF-8, so any text round trip would show.
      const body = Buffer.from([0xff, 0x00, 0xfe, 0x7b, 0x22, 0xc3, 0x28, 0x0a, 0x80]);
      const server = await listen(
        http.createServer(
          idempotency.handler(async (req, res) => {
            runs++;
            if (req.tx)
              await req.tx.query(`INSERT INTO \`${schema}\`.orders (id) VALUES (?)`, [`bytes-${mode}`]);
            res.writeHead(202, {
              'content-type': 'application/octet-stream; x=1',
              location: `/orders/bytes-${mode}`,
              etag: 'W/"v1-é"'.normalize('NFC').replace('é', 'e'),
            });
            res.end(body);
          }),
        ),
      );
      try {
        const first = await post(server.url, { id: 'b' }, { 'idempotency-key': `bytes-${mode}` });
        const firstBody = Buffer.from(await first.arrayBuffer());
        const replay = await post(server.url, { id: 'b' }, { 'idempotency-key': `bytes-${mode}` });
        const replayBody = Buffer.from(await replay.arrayBuffer());
        expect(runs).toBe(1);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.status).toBe(first.status);
        expect(replay.status).toBe(202);
        expect(replayBody.equals(body)).toBe(true);
        expect(firstBody.equals(body)).toBe(true);
        for (const name of ['content-type', 'location', 'etag']) {
          expect(replay.headers.get(name)).toBe(first.headers.get(name));
          expect(replay.headers.get(name)).not.toBeNull();
        }
      } finally {
        await server.close();
      }
    },
  );

  it.each(['transactional', 'leased'] as const)(
    '%s: 422 when the key is reused with another payload, without running the handler',
    async (mode) => {
      const idempotency = new HttpIdempotency({ store, mode, scope: 'tests' });
      let runs = 0;
      const server = await startServer('express', idempotency, async () => {
        runs++;
        return { status: 201, body: { runs } };
      });
      try {
        expect(
          (await post(server.url, { id: 'a', amount: 1 }, { 'idempotency-key': `fp-${mode}` })).status,
        ).toBe(201);
        const other = await post(server.url, { id: 'a', amount: 2 }, { 'idempotency-key': `fp-${mode}` });
        expect(other.status).toBe(422);
        expect(other.headers.get('content-type')).toBe('application/problem+json');
        expect(runs).toBe(1);
      } finally {
        await server.close();
      }
    },
  );

  it('keys are exact: another case or a trailing space is another key (no collation folds them)', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'tests' });
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      return { status: 201, body: { runs } };
    });
    try {
      for (const key of ['Case-Key', 'case-key', '"case-key "']) {
        const response = await post(server.url, { id: 'c' }, { 'idempotency-key': key });
        expect(response.headers.get('idempotent-replayed')).toBeNull();
      }
      expect(runs).toBe(3);
    } finally {
      await server.close();
    }
  });

  it('a handler past handlerTimeoutMs gets a 504, its writes roll back, and a retry runs', async () => {
    const idempotency = new HttpIdempotency({ store, handlerTimeoutMs: 300, scope: 'tests', logger: silent });
    let runs = 0;
    let lateError: unknown;
    const late = gate();
    const server = await startServer('express', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO \`${schema}\`.orders (id) VALUES (?)`, [`slow-${runs}`]);
      if (runs === 1) {
        await late.wait;
        lateError = await tx!
          .query(`INSERT INTO \`${schema}\`.orders (id) VALUES ('late')`)
          .catch((error) => error);
      }
      return { status: 201, body: { runs } };
    });
    try {
      const slow = await post(server.url, { id: 'slow' }, { 'idempotency-key': 'slow' });
      expect(slow.status).toBe(504);
      late.open();
      await expect.poll(() => lateError).toMatchObject({ code: 'HTTP_TRANSACTION_ENDED' });
      const retry = await post(server.url, { id: 'slow' }, { 'idempotency-key': 'slow' });
      expect(retry.status).toBe(201);
      expect(await retry.json()).toEqual({ runs: 2 });
      const ids = await orderIds(schema);
      expect(ids).toContain('slow-2');
      expect(ids).not.toContain('slow-1');
      expect(ids).not.toContain('late');
    } finally {
      late.open();
      await server.close();
    }
  });

  it('a store outage mid-handler answers 503, commits nothing, and a retry runs the handler', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'tests', logger: silent });
    let runs = 0;
    const server = await startServer('fastify', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO \`${schema}\`.orders (id) VALUES (?)`, [`outage-${runs}`]);
      if (runs === 1) {
        // The database ends this request's session mid-handler, as a failover would.
        const { rows } = await tx!.query<{ id: number }>('SELECT CONNECTION_ID() AS id');
        await admin.query(`KILL ${Number(rows[0]!.id)}`);
      }
      return { status: 201, body: { runs } };
    });
    try {
      const cut = await post(server.url, { id: 'o' }, { 'idempotency-key': 'outage' });
      expect(cut.status).toBe(503);
      expect(cut.headers.get('retry-after')).toBe('1');
      expect(await orderIds(schema)).not.toContain('outage-1');
      const retry = await post(server.url, { id: 'o' }, { 'idempotency-key': 'outage' });
      expect(retry.status).toBe(201);
      expect(runs).toBe(2);
      expect(await orderIds(schema)).toContain('outage-2');
    } finally {
      await server.close();
    }
  });

  it('leased mode: a claim past its deadline (a crashed request) is taken over by a retry', async () => {
    const idempotency = new HttpIdempotency({
      store,
      mode: 'leased',
      // The claim's deadline is acquire + leaseMs (no renewal runs before the 200 ms
      // timeout): the 504 and the next POST must both come before it, with room for a
      // busy machine's stalls (1 s left ~800 ms for both).
      leaseMs: 5000,
      handlerTimeoutMs: 200,
      scope: 'tests',
      logger: silent,
    });
    const stuck = gate();
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      if (runs === 1) await stuck.wait;
      return { status: 201, body: { runs } };
    });
    try {
      expect((await post(server.url, { id: 'l' }, { 'idempotency-key': 'lease' })).status).toBe(504);
      // Still within the claim's deadline: the first handler may still be running.
      expect((await post(server.url, { id: 'l' }, { 'idempotency-key': 'lease' })).status).toBe(409);
      await expect
        .poll(async () => (await post(server.url, { id: 'l' }, { 'idempotency-key': 'lease' })).status, {
          timeout: 20_000,
          interval: 200,
        })
        .toBe(201);
      expect(runs).toBe(2);
    } finally {
      stuck.open();
      await server.close();
    }
  });

  it('prune() deletes keys past retention on MySQL too', async () => {
    const idempotency = new HttpIdempotency({ store, retentionMs: 1000, scope: 'prune' });
    const server = await startServer('node', idempotency, async () => ({ status: 201, body: {} }));
    try {
      await post(server.url, { id: 'p' }, { 'idempotency-key': 'pruned' });
      await admin.query('DO SLEEP(1.2)');
      expect(await idempotency.prune({ batchSize: 1 })).toBeGreaterThanOrEqual(1);
      const [rows] = await admin.query(
        `SELECT COUNT(*) AS n FROM \`${schema}\`.http_idempotency_keys WHERE scope = 'prune'`,
      );
      expect(Number((rows as Array<{ n: number }>)[0]!.n)).toBe(0);
    } finally {
      await server.close();
    }
  });

  it('fails closed with 503 when MySQL is down, without running the handler', async () => {
    const down = new MySqlStore({ url: 'mysql://root@127.0.0.1:1/none', connectTimeoutMs: 500 });
    const idempotency = new HttpIdempotency({ store: down, scope: 'tests', logger: silent });
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      return { status: 201, body: {} };
    });
    try {
      const response = await post(server.url, { id: 'x' }, { 'idempotency-key': 'down' });
      expect(response.status).toBe(503);
      expect(runs).toBe(0);
    } finally {
      await server.close();
      await down.close();
    }
  });
});
