import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency, idempotencyKey, idempotentFetch } from '../src/index.js';
import type { RunningServer } from './support.js';
import { openStore, startServer, uniqueSchema } from './support.js';

describe('idempotencyKey', () => {
  it("builds the same key as a consumer's ctx.idempotencyKey(step)", () => {
    expect(idempotencyKey('payments', 'm-1', 'charge')).toBe('payments:m-1:charge');
  });
  it('refuses empty parts, which would collapse keys of different messages', () => {
    expect(() => idempotencyKey('payments', '', 'charge')).toThrow(/messageId/);
    expect(() => idempotencyKey('payments', 'm-1', ' ')).toThrow(/step/);
  });
});

describe('idempotentFetch against a server running @oncely/http (PGlite)', () => {
  const schema = uniqueSchema('http_outbound');
  let store: PostgresStore;
  let server: RunningServer;
  const seen: string[] = [];
  let failuresLeft = 0;
  let runs = 0;

  beforeAll(async () => {
    store = await openStore('pglite', schema);
    server = await startServer(
      'node',
      new HttpIdempotency({ store, scope: 'tests' }),
      async ({ headers }) => {
        seen.push(String(headers['idempotency-key']));
        runs++;
        if (failuresLeft > 0) {
          failuresLeft--;
          return { status: 503, body: { error: 'busy' } };
        }
        return { status: 201, body: { charged: true } };
      },
    );
  });
  afterAll(async () => {
    await server?.close();
    await store?.close();
  });

  it('retries a 5xx with the same key until the provider succeeds', async () => {
    failuresLeft = 2;
    seen.length = 0;
    const key = idempotencyKey('payments', 'm-retry', 'charge');
    const response = await idempotentFetch(
      key,
      `${server.url}/orders`,
      { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":40}' },
      { initialDelayMs: 5 },
    );
    expect(response.status).toBe(201);
    expect(seen).toEqual([key, key, key]);
  });

  it('a response lost on the way back is retried and replayed: the charge runs once', async () => {
    const before = runs;
    let calls = 0;
    const lossyFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (++calls === 1) {
        await response.body?.cancel();
        throw new TypeError('fetch failed: socket hang up');
      }
      return response;
    };
    const response = await idempotentFetch(
      idempotencyKey('payments', 'm-lost', 'charge'),
      `${server.url}/orders`,
      { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":40}' },
      { initialDelayMs: 5, fetch: lossyFetch },
    );
    expect(response.status).toBe(201);
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    expect(runs - before).toBe(1);
  });

  it('gives the last response back when the retries run out, and refuses a body it cannot resend', async () => {
    failuresLeft = 10;
    const response = await idempotentFetch(
      'k-out',
      `${server.url}/orders`,
      { method: 'POST', body: '{}' },
      {
        retries: 1,
        initialDelayMs: 1,
      },
    );
    expect(response.status).toBe(503);
    failuresLeft = 0;
    await expect(
      idempotentFetch('k-stream', `${server.url}/orders`, { method: 'POST', body: new ReadableStream() }),
    ).rejects.toMatchObject({ code: 'HTTP_OUTBOUND_BODY' });
  });
});
