import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import type { AppLogic, Framework, RunningServer, StoreKind } from './support.js';
import {
  admin,
  countOrders,
  gate,
  openStore,
  post,
  postgresAvailable,
  startServer,
  uniqueSchema,
} from './support.js';

const hasPostgres = await postgresAvailable();
const stores: StoreKind[] = hasPostgres ? ['postgres', 'pglite'] : ['pglite'];
const frameworks: Framework[] = ['node', 'express', 'fastify'];

/** The handler every test serves: writes one order through req.tx and counts its runs. */
function ordersLogic(runs: { count: number }, options: { status?: () => number } = {}): AppLogic {
  return async ({ tx, body }) => {
    runs.count++;
    const status = options.status?.() ?? 201;
    await tx!.query(`INSERT INTO ${schemaRef.current}.orders (id, amount) VALUES ($1, $2)`, [
      body!.id,
      body!.amount,
    ]);
    return { status, body: { id: body!.id, run: runs.count } };
  };
}
const schemaRef = { current: '' };

describe.each(stores)('on %s', (storeKind) => {
  describe.each(frameworks)('%s, transactional mode', (framework) => {
    const schema = uniqueSchema(`http_${framework}`);
    let store: PostgresStore;
    let server: RunningServer;
    const runs = { count: 0 };
    let failing = false;

    beforeAll(async () => {
      store = await openStore(storeKind, schema);
      const idempotency = new HttpIdempotency({
        store,
        scope: (req) => String(req.headers['x-client'] ?? 'anonymous'),
      });
      await idempotency.migrate();
      server = await startServer(framework, idempotency, async (call) => {
        schemaRef.current = `"${schema}"`;
        if (failing) {
          runs.count++;
          await call.tx!.query(`INSERT INTO "${schema}".orders (id, amount) VALUES ('failed-write', 1)`);
          return { status: 500, body: { error: 'boom' } };
        }
        return ordersLogic(runs)(call);
      });
    });
    afterAll(async () => {
      await server?.close();
      await store?.close();
      if (storeKind === 'postgres') await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    });

    it('runs the first request, then replays its response without running the handler', async () => {
      const before = runs.count;
      const first = await post(server.url, { id: 'o-1', amount: 40 }, { 'idempotency-key': 'k-1' });
      expect(first.status).toBe(201);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      const firstBody = await first.text();
      const retry = await post(server.url, { id: 'o-1', amount: 40 }, { 'idempotency-key': 'k-1' });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.headers.get('content-type')).toContain('application/json');
      // Only the selected headers are stored.
      expect(retry.headers.get('x-handler')).toBeNull();
      expect(await retry.text()).toBe(firstBody);
      expect(runs.count - before).toBe(1);
      expect(await countOrders(store, schema)).toBe(1);
    });

    it("accepts the draft's quoted sf-string form of the key as the same key", async () => {
      const before = runs.count;
      const first = await post(server.url, { id: 'o-q', amount: 1 }, { 'idempotency-key': '"k-q"' });
      const retry = await post(server.url, { id: 'o-q', amount: 1 }, { 'idempotency-key': 'k-q' });
      expect([first.status, retry.status]).toEqual([201, 201]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(runs.count - before).toBe(1);
    });

    it('answers 400 to a missing or malformed key, without running the handler', async () => {
      const before = runs.count;
      const missing = await post(server.url, { id: 'o-2', amount: 1 });
      expect(missing.status).toBe(400);
      expect(missing.headers.get('content-type')).toBe('application/problem+json');
      expect(((await missing.json()) as { title: string }).title).toMatch(/missing/);
      const empty = await post(server.url, { id: 'o-2', amount: 1 }, { 'idempotency-key': '""' });
      expect(empty.status).toBe(400);
      const tooLong = await post(
        server.url,
        { id: 'o-2', amount: 1 },
        { 'idempotency-key': 'x'.repeat(256) },
      );
      expect(tooLong.status).toBe(400);
      expect(runs.count).toBe(before);
    });

    it('answers 422 when a key is reused with a different payload', async () => {
      const first = await post(server.url, { id: 'o-3', amount: 10 }, { 'idempotency-key': 'k-3' });
      expect(first.status).toBe(201);
      const before = runs.count;
      const other = await post(server.url, { id: 'o-3', amount: 99 }, { 'idempotency-key': 'k-3' });
      expect(other.status).toBe(422);
      expect(((await other.json()) as { title: string }).title).toBe('Idempotency-Key is already used');
      // Same payload with keys in another order is the same payload.
      const reordered = await fetch(`${server.url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k-3' },
        body: '{"amount":10,"id":"o-3"}',
      });
      if (framework === 'node') {
        // The Node wrapper fingerprints the raw bytes: another byte sequence is another payload.
        expect(reordered.status).toBe(422);
      } else {
        expect(reordered.status).toBe(201);
        expect(reordered.headers.get('idempotent-replayed')).toBe('true');
      }
      expect(runs.count).toBe(before);
    });

    it('scopes keys per client: the same key from two clients runs twice', async () => {
      const before = runs.count;
      const a = await post(
        server.url,
        { id: 'o-4a', amount: 1 },
        { 'idempotency-key': 'shared', 'x-client': 'a' },
      );
      const b = await post(
        server.url,
        { id: 'o-4b', amount: 1 },
        { 'idempotency-key': 'shared', 'x-client': 'b' },
      );
      expect([a.status, b.status]).toEqual([201, 201]);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
      expect(((await b.json()) as { id: string }).id).toBe('o-4b');
      expect(runs.count - before).toBe(2);
    });

    it('lets methods outside POST/PATCH through without a key', async () => {
      const response = await fetch(`${server.url}/orders`, { headers: { 'x-client': 'get' } }).catch(
        () => undefined,
      );
      // GET with no body: the handler runs without a transaction and fails on tx!, answering 500;
      // what matters is that the middleware did not demand a key (no 400).
      expect(response?.status).not.toBe(400);
    });

    it("rolls back a 5xx's writes and re-runs it on retry (failures: 'rerun', the default)", async () => {
      const before = runs.count;
      failing = true;
      const first = await post(server.url, { id: 'o-5', amount: 1 }, { 'idempotency-key': 'k-5' });
      failing = false;
      expect(first.status).toBe(500);
      const { rows } = await store.transaction((tx) =>
        tx.query(`SELECT 1 FROM "${schema}".orders WHERE id = 'failed-write'`),
      );
      expect(rows).toHaveLength(0);
      const retry = await post(server.url, { id: 'o-5', amount: 1 }, { 'idempotency-key': 'k-5' });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(runs.count - before).toBe(2);
    });
  });
});

describe.each(stores)("on %s: failures: 'store' replays a stored 5xx", (storeKind) => {
  const schema = uniqueSchema('http_store_failures');
  let store: PostgresStore;
  afterAll(async () => {
    await store?.close();
    if (storeKind === 'postgres') await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  it.each(['transactional', 'leased'] as const)('%s mode', async (mode) => {
    store ??= await openStore(storeKind, schema);
    const idempotency = new HttpIdempotency({ store, mode, failures: 'store', scope: 'tests' });
    let runs = 0;
    const server = await startServer('express', idempotency, async ({ tx }) => {
      runs++;
      if (tx) await tx.query(`INSERT INTO "${schema}".orders (id) VALUES ('${mode}-write')`);
      return { status: 502, body: { error: 'provider down', run: runs } };
    });
    try {
      const first = await post(server.url, { n: 1 }, { 'idempotency-key': `k-${mode}` });
      expect(first.status).toBe(502);
      const firstBody = await first.text();
      const retry = await post(server.url, { n: 1 }, { 'idempotency-key': `k-${mode}` });
      expect(retry.status).toBe(502);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.text()).toBe(firstBody);
      expect(runs).toBe(1);
      // The failure is stored, but a failed handler's writes never commit.
      const { rows } = await store.transaction((tx) =>
        tx.query(`SELECT 1 FROM "${schema}".orders WHERE id = '${mode}-write'`),
      );
      expect(rows).toHaveLength(0);
    } finally {
      await server.close();
    }
  });
});

describe.skipIf(!hasPostgres)('on the real PostgreSQL: concurrency', () => {
  const schema = uniqueSchema('http_concurrency');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  describe.each(frameworks)('%s', (framework) => {
    it.each(['transactional', 'leased'] as const)(
      '%s: concurrent identical requests run once; the others get 409 while it runs, then a replay',
      async (mode) => {
        const idempotency = new HttpIdempotency({ store, mode, scope: 'tests' });
        const first = gate();
        let runs = 0;
        const key = `${framework}-${mode}`;
        const server = await startServer(framework, idempotency, async ({ tx, body }) => {
          runs++;
          first.enter();
          await first.wait;
          if (tx) await tx.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [body!.id]);
          else
            await store.transaction((own) =>
              own.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [body!.id]),
            );
          return { status: 201, body: { id: body!.id } };
        });
        try {
          const leader = post(server.url, { id: key }, { 'idempotency-key': key });
          await first.entered;
          const racers = await Promise.all(
            Array.from({ length: 5 }, () => post(server.url, { id: key }, { 'idempotency-key': key })),
          );
          expect(racers.map((r) => r.status)).toEqual([409, 409, 409, 409, 409]);
          expect(racers[0]!.headers.get('retry-after')).toBe('1');
          first.open();
          expect((await leader).status).toBe(201);
          const after = await Promise.all(
            Array.from({ length: 5 }, () => post(server.url, { id: key }, { 'idempotency-key': key })),
          );
          expect(after.map((r) => r.status)).toEqual([201, 201, 201, 201, 201]);
          expect(after.every((r) => r.headers.get('idempotent-replayed') === 'true')).toBe(true);
          expect(runs).toBe(1);
          const { rows } = await admin.query(
            `SELECT count(*)::int AS n FROM "${schema}".orders WHERE id = $1`,
            [key],
          );
          expect(rows[0].n).toBe(1);
        } finally {
          first.open();
          await server.close();
        }
      },
    );
  });

  it('a burst of 20 identical requests at once executes the handler exactly once', async () => {
    const idempotency = new HttpIdempotency({ store, scope: 'tests' });
    let runs = 0;
    const server = await startServer('node', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ('burst')`);
      return { status: 201, body: { ok: true } };
    });
    try {
      const responses = await Promise.all(
        Array.from({ length: 20 }, () => post(server.url, { id: 'burst' }, { 'idempotency-key': 'burst' })),
      );
      for (const response of responses) expect([201, 409]).toContain(response.status);
      expect(runs).toBe(1);
      const replay = await post(server.url, { id: 'burst' }, { 'idempotency-key': 'burst' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
    } finally {
      await server.close();
    }
  });

  it('never sends a success whose writes did not commit (a caught SQL error aborts the transaction)', async () => {
    const idempotency = new HttpIdempotency({ store, logger: silent, scope: 'tests' });
    let runs = 0;
    const server = await startServer('express', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ('aborted')`);
      if (runs === 1) await tx!.query('SELECT 1/0').catch(() => {}); // leaves the transaction aborted
      return { status: 201, body: { ok: true } };
    });
    try {
      const first = await post(server.url, { id: 'aborted' }, { 'idempotency-key': 'aborted' });
      expect(first.status).toBe(500);
      expect(first.headers.get('content-type')).toBe('application/problem+json');
      const retry = await post(server.url, { id: 'aborted' }, { 'idempotency-key': 'aborted' });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(runs).toBe(2);
    } finally {
      await server.close();
    }
  });

  it('forgets a key after retention, and prune() deletes it', async () => {
    const idempotency = new HttpIdempotency({ store, retentionMs: 2000, scope: 'tests' });
    let runs = 0;
    const server = await startServer('node', idempotency, async () => {
      runs++;
      return { status: 201, body: { runs } };
    });
    try {
      await post(server.url, { id: 'r' }, { 'idempotency-key': 'retained' });
      const replay = await post(server.url, { id: 'r' }, { 'idempotency-key': 'retained' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      await admin.query('SELECT pg_sleep(2.1)');
      const again = await post(server.url, { id: 'r' }, { 'idempotency-key': 'retained' });
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      expect(runs).toBe(2);
      await admin.query('SELECT pg_sleep(2.1)');
      expect(await idempotency.prune()).toBeGreaterThanOrEqual(1);
      const { rows } = await admin.query(
        `SELECT count(*)::int AS n FROM "${schema}".http_idempotency_keys WHERE idempotency_key = 'retained'`,
      );
      expect(rows[0].n).toBe(0);
    } finally {
      await server.close();
    }
  });

  it('fails closed with 503 when the store is down, without running the handler', async () => {
    const { PostgresStore } = await import('@oncely/postgres');
    const down = new PostgresStore({
      connectionString: 'postgres://postgres@127.0.0.1:1/none',
      connectTimeoutMs: 500,
    });
    const idempotency = new HttpIdempotency({ store: down, logger: silent, scope: 'tests' });
    let runs = 0;
    const server = await startServer('fastify', idempotency, async () => {
      runs++;
      return { status: 201, body: {} };
    });
    try {
      const response = await post(server.url, { id: 'x' }, { 'idempotency-key': 'down' });
      expect(response.status).toBe(503);
      expect(response.headers.get('retry-after')).toBe('1');
      expect(runs).toBe(0);
    } finally {
      await server.close();
      await down.close();
    }
  });
});

const silent = { debug() {}, info() {}, warn() {}, error() {} };

describe('a handler that never answers (transactional mode, PGlite)', () => {
  it('is settled as a 504 after handlerTimeoutMs, its writes rolled back, and the key free for a retry', async () => {
    const schema = uniqueSchema('http_timeout');
    const store = await openStore('pglite', schema);
    // 200 ms for the first run only: the retry is served by a second middleware on the same
    // store and scope with the default bound, so a loaded machine's stall cannot turn the
    // retry into a 504 too.
    const impatient = new HttpIdempotency({ store, handlerTimeoutMs: 200, scope: 'tests' });
    const patient = new HttpIdempotency({ store, scope: 'tests' });
    let runs = 0;
    let lateError: unknown;
    let sawTimeout!: () => void;
    const timedOut = new Promise<void>((resolve) => {
      sawTimeout = resolve;
    });
    const logic: AppLogic = async ({ tx }) => {
      runs++;
      if (runs === 1) {
        // A stall past 200 ms may already have ended the transaction here: then this
        // statement is the one that must not run.
        const early = await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ('slow-1')`).then(
          () => undefined,
          (error: unknown) => error,
        );
        // Held until the client has its 504 (10 s at most, so a timeout that never fires
        // fails on the status below instead of hanging).
        await Promise.race([timedOut, new Promise((resolve) => setTimeout(resolve, 10_000))]);
        // Too late: the transaction is gone, and the statement must not run anywhere.
        lateError =
          early ??
          (await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ('late')`).catch((error) => error));
        return { status: 201, body: { runs } };
      }
      await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ('slow-${runs}')`);
      return { status: 201, body: { runs } };
    };
    const server = await startServer('express', impatient, logic);
    const retryServer = await startServer('express', patient, logic);
    try {
      const slow = await post(server.url, { id: 'slow' }, { 'idempotency-key': 'slow' });
      expect(slow.status).toBe(504);
      sawTimeout();
      const retry = await post(retryServer.url, { id: 'slow' }, { 'idempotency-key': 'slow' });
      expect(retry.status).toBe(201);
      expect(await retry.json()).toEqual({ runs: 2 });
      const { rows } = await store.transaction((tx) =>
        tx.query(`SELECT id FROM "${schema}".orders ORDER BY id`),
      );
      expect(rows).toEqual([{ id: 'slow-2' }]);
      await expect
        .poll(() => lateError, { timeout: 15_000 })
        .toMatchObject({ code: 'HTTP_TRANSACTION_ENDED' });
    } finally {
      sawTimeout();
      await server.close();
      await retryServer.close();
      await store.close();
    }
  });
});

describe.skipIf(!hasPostgres)('leased mode renews the claim while the handler runs (real PostgreSQL)', () => {
  it('a handler running past leaseMs keeps its key: a retry still gets 409, then the replay', async () => {
    const schema = uniqueSchema('http_renew');
    const store = await openStore('postgres', schema);
    // Renewed every leaseMs / 3: a renewal may run up to two thirds of a lease late (2 s
    // here, on a busy machine) before the claim lapses.
    const idempotency = new HttpIdempotency({ store, mode: 'leased', leaseMs: 3000, scope: 'tests' });
    const first = gate();
    let runs = 0;
    const server = await startServer('fastify', idempotency, async () => {
      runs++;
      first.enter();
      await first.wait;
      return { status: 201, body: { runs } };
    });
    try {
      const leader = post(server.url, { id: 'long' }, { 'idempotency-key': 'long' });
      await first.entered;
      // Two lease lengths later, on the database clock: only renewals keep the claim alive
      // (unrenewed it lapsed 3 s ago; renewed once, at 1 s, it lapsed 2 s ago).
      await admin.query('SELECT pg_sleep(6)');
      const during = await post(server.url, { id: 'long' }, { 'idempotency-key': 'long' });
      expect(during.status).toBe(409);
      first.open();
      expect((await leader).status).toBe(201);
      const replay = await post(server.url, { id: 'long' }, { 'idempotency-key': 'long' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(runs).toBe(1);
    } finally {
      first.open();
      await server.close();
      await store.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});

describe('on PGlite (one connection): concurrent identical requests', () => {
  it.each(['transactional', 'leased'] as const)(
    '%s: exactly one execution; the others get 409 or wait and get the replay',
    async (mode) => {
      const schema = uniqueSchema('http_pglite_race');
      const store = await openStore('pglite', schema);
      const idempotency = new HttpIdempotency({ store, mode, scope: 'tests' });
      const first = gate();
      let runs = 0;
      const server = await startServer('express', idempotency, async ({ tx }) => {
        runs++;
        first.enter();
        await first.wait;
        if (tx) await tx.query(`INSERT INTO "${schema}".orders (id) VALUES ('race')`);
        return { status: 201, body: { ok: true } };
      });
      try {
        const leader = post(server.url, { id: 'race' }, { 'idempotency-key': 'race' });
        await first.entered;
        // Transactional mode: these queue behind the leader's transaction on the one
        // connection. Leased mode: the claim is committed, so they answer 409 at once.
        const racers = Array.from({ length: 5 }, () =>
          post(server.url, { id: 'race' }, { 'idempotency-key': 'race' }),
        );
        if (mode === 'leased') {
          for (const response of await Promise.all(racers)) expect(response.status).toBe(409);
        }
        first.open();
        expect((await leader).status).toBe(201);
        for (const response of await Promise.all(racers)) {
          if (response.status === 201) expect(response.headers.get('idempotent-replayed')).toBe('true');
          else expect(response.status).toBe(409);
        }
        expect(runs).toBe(1);
      } finally {
        first.open();
        await server.close();
        await store.close();
      }
    },
  );
});
