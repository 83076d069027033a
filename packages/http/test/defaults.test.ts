/**
 * The defaults decided against the draft and Stripe (README, "Defaults and why"): scope is
 * required, the query string is part of the request's fingerprint, failures are re-run
 * (not stored) unless `failures: 'store'`, and problem answers link to the API's
 * documentation when it is given. Real PostgreSQL.
 */
import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import type { Framework } from './support.js';
import { admin, openStore, postgresAvailable, rawRequest, startServer, uniqueSchema } from './support.js';

const hasPostgres = await postgresAvailable();
const frameworks: Framework[] = ['node', 'express', 'fastify'];

describe('scope', () => {
  it('is required: without it the constructor says what to pass', async () => {
    const store = {
      transaction: async () => undefined,
      classifyError: () => 'other',
      httpKeys: () => ({}),
    } as never;
    expect(() => new HttpIdempotency({ store } as never)).toThrow(/scope is required/);
    expect(() => new HttpIdempotency({ store, scope: 42 } as never)).toThrow(/scope is required/);
  });

  it('a store that cannot hold HTTP keys (no httpKeys()) is refused up front, saying which can', () => {
    const store = { transaction: async () => undefined, classifyError: () => 'other' } as never;
    expect(() => new HttpIdempotency({ store, scope: 'tests' })).toThrow(
      /store cannot hold HTTP idempotency keys .*PostgresStore or a MySqlStore/,
    );
  });
});

describe.skipIf(!hasPostgres)('defaults on the real PostgreSQL', () => {
  const schema = uniqueSchema('http_defaults');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  it.each(frameworks)(
    '%s: a fixed scope is one scope for every request; a function keeps two clients apart',
    async (framework) => {
      let runs = 0;
      const logic = async () => ({ status: 201, body: { run: ++runs } });
      const shared = await startServer(
        framework,
        new HttpIdempotency({ store, scope: `fixed-${framework}` }),
        logic,
      );
      const perClient = await startServer(
        framework,
        new HttpIdempotency({
          store,
          scope: (req) => `client-${framework}-${String(req.headers['x-client'])}`,
        }),
        logic,
      );
      try {
        const send = (url: string, client: string) =>
          rawRequest(url, {
            headers: { 'content-type': 'application/json', 'idempotency-key': 'same', 'x-client': client },
            body: '{}',
          });
        await send(shared.url, 'a');
        const sharedB = await send(shared.url, 'b');
        expect(sharedB.kind === 'response' && sharedB.headers['idempotent-replayed']).toBe('true');
        await send(perClient.url, 'a');
        const ownB = await send(perClient.url, 'b');
        expect(ownB.kind === 'response' && ownB.headers['idempotent-replayed']).toBeUndefined();
        expect(runs).toBe(3);
      } finally {
        await shared.close();
        await perClient.close();
      }
    },
  );

  it.each(frameworks)(
    '%s: the same key with another query string is another request (422); reordered parameters are the same',
    async (framework) => {
      let runs = 0;
      const server = await startServer(
        framework,
        new HttpIdempotency({ store, scope: () => `query-${framework}` }),
        async () => ({ status: 201, body: { run: ++runs } }),
      );
      try {
        const send = (path: string) =>
          rawRequest(server.url, {
            path,
            headers: { 'content-type': 'application/json', 'idempotency-key': 'q' },
            body: '{}',
          });
        const first = await send('/orders?amount=5&currency=eur');
        const reordered = await send('/orders?currency=eur&amount=5');
        const other = await send('/orders?amount=10&currency=eur');
        const none = await send('/orders');
        expect([first, reordered, other, none].map((o) => o.kind === 'response' && o.status)).toEqual([
          201, 201, 422, 422,
        ]);
        expect(reordered.kind === 'response' && reordered.headers['idempotent-replayed']).toBe('true');
        expect(runs).toBe(1);
      } finally {
        await server.close();
      }
    },
  );

  it('problem answers link to the documentation when documentationUrl is set, about:blank otherwise', async () => {
    const documented = await startServer(
      'node',
      new HttpIdempotency({
        store,
        scope: () => 'docs',
        documentationUrl: 'https://api.example.com/docs/idempotency',
      }),
      async () => ({ status: 201, body: {} }),
    );
    const plain = await startServer(
      'node',
      new HttpIdempotency({ store, scope: () => 'plain' }),
      async () => ({
        status: 201,
        body: {},
      }),
    );
    try {
      const missing = await rawRequest(documented.url, {
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(missing.kind === 'response' && missing.status).toBe(400);
      expect(missing.kind === 'response' && JSON.parse(missing.body)).toMatchObject({
        type: 'https://api.example.com/docs/idempotency#idempotency-key-missing',
        title: 'Idempotency-Key is missing',
        status: 400,
      });
      expect(missing.kind === 'response' && missing.headers.link).toBe(
        '<https://api.example.com/docs/idempotency>; rel="describedby"',
      );
      const malformed = await rawRequest(plain.url, {
        headers: { 'content-type': 'application/json', 'idempotency-key': '"open' },
        body: '{}',
      });
      expect(malformed.kind === 'response' && JSON.parse(malformed.body).type).toBe('about:blank');
      expect(malformed.kind === 'response' && malformed.headers.link).toBeUndefined();
      expect(() => new HttpIdempotency({ store, scope: 'x', documentationUrl: 'not a url' })).toThrow(
        /documentationUrl must be an absolute URL/,
      );
    } finally {
      await documented.close();
      await plain.close();
    }
  });
});
