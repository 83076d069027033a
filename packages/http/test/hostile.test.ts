/**
 * A hostile pass over the README's promises, on the real PostgreSQL: bursts of identical
 * requests, bodies over the limit, big responses replayed byte for byte, scope and
 * fingerprint functions that fail, late writes, and a leased handler answering after its
 * 504.
 */
import http from 'node:http';
import type { PostgresStore } from '@oncely/postgres';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import type { Framework } from './support.js';
import {
  admin,
  gate,
  listen,
  openStore,
  postgresAvailable,
  rawRequest,
  startServer,
  uniqueSchema,
} from './support.js';

const hasPostgres = await postgresAvailable();
const frameworks: Framework[] = ['node', 'express', 'fastify'];
const silent = { debug() {}, info() {}, warn() {}, error() {} };

describe.skipIf(!hasPostgres)('hostile pass (real PostgreSQL)', () => {
  const schema = uniqueSchema('http_hostile');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  const orders = async (id: string) =>
    (await admin.query(`SELECT count(*)::int AS n FROM "${schema}".orders WHERE id = $1`, [id])).rows[0].n;

  describe.each(frameworks)('%s', (framework) => {
    it.each(['transactional', 'leased'] as const)(
      '%s: 20 identical POSTs at once run the handler once; the others get 409 or the replay',
      async (mode) => {
        const id = `burst-${framework}-${mode}`;
        let runs = 0;
        const server = await startServer(
          framework,
          new HttpIdempotency({ store, mode, scope: 'hostile', logger: silent }),
          async ({ tx }) => {
            runs++;
            const sql = `INSERT INTO "${schema}".orders (id) VALUES ($1)`;
            if (tx) await tx.query(sql, [id]);
            else await store.transaction((own) => own.query(sql, [id]));
            return { status: 201, body: { id } };
          },
        );
        try {
          const outcomes = await Promise.all(
            Array.from({ length: 20 }, () =>
              rawRequest(server.url, {
                headers: { 'content-type': 'application/json', 'idempotency-key': id },
                body: JSON.stringify({ id }),
              }),
            ),
          );
          const statuses = outcomes.map((o) => (o.kind === 'response' ? o.status : o.kind));
          expect(statuses.filter((s) => s === 201).length).toBeGreaterThanOrEqual(1);
          expect(statuses.every((s) => s === 201 || s === 409)).toBe(true);
          for (const outcome of outcomes) {
            if (outcome.kind === 'response' && outcome.status === 409) {
              expect(outcome.headers['retry-after']).toBe('1');
            }
          }
          expect(runs).toBe(1);
          expect(await orders(id)).toBe(1);
        } finally {
          await server.close();
        }
      },
    );

    it('a 3 MiB response is replayed byte for byte, with its content-length', async () => {
      const big = Buffer.alloc(3 * 1024 * 1024);
      for (let i = 0; i < big.length; i++) big[i] = (i * 7) % 251;
      let runs = 0;
      const server = await startServer(
        framework,
        new HttpIdempotency({ store, scope: 'hostile', logger: silent }),
        async () => {
          runs++;
          return { status: 201, body: { data: big.toString('base64') } };
        },
      );
      try {
        const send = () =>
          rawRequest(server.url, {
            headers: { 'content-type': 'application/json', 'idempotency-key': `big-${framework}` },
            body: '{}',
          });
        const first = await send();
        const replay = await send();
        expect(first.kind === 'response' && first.status).toBe(201);
        expect(replay.kind === 'response' && replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.kind === 'response' && replay.body).toBe(first.kind === 'response' && first.body);
        expect(replay.kind === 'response' && Number(replay.headers['content-length'])).toBe(
          first.kind === 'response' ? Buffer.byteLength(first.body) : -1,
        );
        expect(runs).toBe(1);
      } finally {
        await server.close();
      }
    });

    it('a scope or fingerprint function that fails answers 500 without running the handler', async () => {
      let runs = 0;
      const logic = async () => ({ status: 201, body: {} });
      const counting = async () => {
        runs++;
        return logic();
      };
      const throwingScope = await startServer(
        framework,
        new HttpIdempotency({
          store,
          scope: () => {
            throw new Error('no account');
          },
          logger: silent,
        }),
        counting,
      );
      const nonString = await startServer(
        framework,
        new HttpIdempotency({ store, scope: (() => 42) as never, logger: silent }),
        counting,
      );
      const throwingFingerprint = await startServer(
        framework,
        new HttpIdempotency({
          store,
          scope: 'hostile',
          fingerprint: () => {
            throw new Error('cannot hash');
          },
          logger: silent,
        }),
        counting,
      );
      try {
        for (const server of [throwingScope, nonString, throwingFingerprint]) {
          const outcome = await rawRequest(server.url, {
            headers: { 'content-type': 'application/json', 'idempotency-key': 'k' },
            body: '{}',
          });
          expect(outcome.kind === 'response' && outcome.status).toBe(500);
          expect(outcome.kind === 'response' && outcome.headers['content-type']).toBe(
            'application/problem+json',
          );
        }
        expect(runs).toBe(0);
      } finally {
        await throwingScope.close();
        await nonString.close();
        await throwingFingerprint.close();
      }
    });

    it('required: false runs a request without a key unprotected; GET passes through', async () => {
      let runs = 0;
      const server = await startServer(
        framework,
        new HttpIdempotency({ store, scope: 'hostile', required: false, logger: silent }),
        async () => ({ status: 201, body: { run: ++runs } }),
      );
      try {
        const post = () =>
          rawRequest(server.url, { headers: { 'content-type': 'application/json' }, body: '{}' });
        expect([(await post()).kind, (await post()).kind]).toEqual(['response', 'response']);
        const get = await rawRequest(server.url, { method: 'GET' });
        expect(get.kind === 'response' && get.status).toBe(201);
        expect(runs).toBe(3);
      } finally {
        await server.close();
      }
    });
  });

  it.each(['node', 'express'] as const)(
    '%s (no body parser): a body over maxBodyBytes answers 413 without running the handler',
    async (framework) => {
      let runs = 0;
      const idempotency = new HttpIdempotency({
        store,
        scope: 'hostile',
        maxBodyBytes: 1024,
        logger: silent,
      });
      const handle = (_req: http.IncomingMessage, res: http.ServerResponse) => {
        runs++;
        res.writeHead(201).end();
      };
      let server: http.Server;
      if (framework === 'express') {
        const app = express();
        app.use(idempotency.express());
        app.post('/orders', handle);
        server = http.createServer(app);
      } else {
        server = http.createServer(idempotency.handler(handle));
      }
      const running = await listen(server);
      try {
        for (const headers of [
          { 'content-length': String(4096) },
          { 'transfer-encoding': 'chunked' },
        ] as const) {
          const outcome = await rawRequest(running.url, {
            headers: { 'idempotency-key': 'too-big', ...headers },
            body: Buffer.alloc(4096, 'x'),
          });
          expect(outcome.kind === 'response' && outcome.status).toBe(413);
        }
        expect(runs).toBe(0);
      } finally {
        await running.close();
      }
    },
  );

  it('a late write after the 504 gets HTTP_RESPONSE_SENT in its callback; the server keeps serving', async () => {
    const idempotency = new HttpIdempotency({
      store,
      scope: 'hostile',
      handlerTimeoutMs: 300,
      logger: silent,
    });
    let lateError: unknown;
    const server = await listen(
      http.createServer(
        idempotency.handler(async (req, res) => {
          await new Promise<void>((resolve) =>
            req.idempotency!.signal.addEventListener('abort', () => resolve()),
          );
          lateError = await new Promise((resolve) => res.write('late', (error) => resolve(error)));
        }),
      ),
    );
    try {
      const outcome = await rawRequest(server.url, { headers: { 'idempotency-key': 'late-write' } });
      expect(outcome.kind === 'response' && outcome.status).toBe(504);
      await expect.poll(() => lateError).toMatchObject({ code: 'HTTP_RESPONSE_SENT' });
    } finally {
      await server.close();
    }
  });

  it('leased: a handler that answers after its 504 has its late response dropped; the claim expires as after a crash', async () => {
    const entered = gate();
    const idempotency = new HttpIdempotency({
      store,
      scope: 'hostile',
      mode: 'leased',
      handlerTimeoutMs: 500,
      // No renewal runs before the timeout: the 504 and the 'during' request below must
      // both come before acquire + leaseMs, with room for a busy machine's stalls.
      leaseMs: 4000,
      logger: silent,
    });
    let runs = 0;
    let reason: unknown;
    let answeredLate = false;
    const server = await startServer('express', idempotency, async () => {
      runs++;
      if (runs === 1) {
        entered.enter();
        await entered.wait;
        answeredLate = true;
      }
      return { status: 201, body: { run: runs } };
    });
    // The handler's signal tells it why (HTTP_HANDLER_TIMEOUT).
    const seen = idempotency.decide.bind(idempotency);
    idempotency.decide = async (request) => {
      const decision = await seen(request);
      if (decision.kind === 'run')
        decision.signal.addEventListener('abort', () => (reason = decision.signal.reason));
      return decision;
    };
    try {
      const send = () =>
        rawRequest(server.url, {
          headers: { 'content-type': 'application/json', 'idempotency-key': 'leased-late' },
          body: '{}',
        });
      const first = await send();
      expect(first.kind === 'response' && first.status).toBe(504);
      expect(reason).toMatchObject({ code: 'HTTP_HANDLER_TIMEOUT' });
      entered.open();
      // Its late 201 is not stored: the key stays in progress until its deadline (409)...
      await expect.poll(() => answeredLate).toBe(true);
      const during = await send();
      expect(during.kind === 'response' && during.status).toBe(409);
      // ...then a retry takes it over and runs the handler, as after a crash.
      const { rows } = await admin.query<{ wait: number }>(
        `SELECT greatest(0, extract(epoch FROM locked_until - now()) * 1000)::int AS wait
         FROM "${schema}".http_idempotency_keys WHERE idempotency_key = 'leased-late'`,
      );
      await admin.query('SELECT pg_sleep($1::double precision / 1000)', [rows[0]!.wait + 50]);
      const takeover = await send();
      expect(takeover.kind === 'response' && takeover.status).toBe(201);
      expect(takeover.kind === 'response' && JSON.parse(takeover.body)).toEqual({ run: 2 });
    } finally {
      entered.open();
      await server.close();
    }
  });
});
