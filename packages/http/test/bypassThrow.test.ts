/**
 * A request the middleware lets through (a GET, or no key with `required: false`) whose
 * node:http handler throws after it started its body: the wrapper's 500 cannot be sent any
 * more (the head is out). It used to try anyway: setHeader threw ERR_HTTP_HEADERS_SENT out
 * of the wrapper's promise, which node:http does not await, so the process got an unhandled
 * rejection (the default on Node 15+: the process exits) and the client hung. The wrapper
 * now cuts the response (the client sees a truncated body, never a complete one).
 */
import http from 'node:http';
import { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import {
  admin,
  connectionString,
  gate,
  listen,
  postgresAvailable,
  rawRequest,
  uniqueSchema,
} from './support.js';

const hasPostgres = await postgresAvailable();
const silent = { debug() {}, info() {}, warn() {}, error() {} };

describe.skipIf(!hasPostgres)('node:http: a let-through request whose handler throws mid-body', () => {
  const schema = uniqueSchema('http_bypass_throw');
  let store: PostgresStore;
  const rejections: unknown[] = [];
  const onRejection = (reason: unknown) => rejections.push(reason);
  beforeAll(async () => {
    store = new PostgresStore({ connectionString, schema, poolMax: 2 });
    await store.migrate();
    process.on('unhandledRejection', onRejection);
  });
  afterAll(async () => {
    process.off('unhandledRejection', onRejection);
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  it.each([
    ['GET', {}],
    ['POST without a key (required: false)', { 'content-length': '0' }],
  ] as const)(
    '%s: the response is cut, nothing is unhandled, the server serves on',
    async (label, headers) => {
      const idempotency = new HttpIdempotency({ store, scope: 'bypass', required: false, logger: silent });
      let thrown = 0;
      const settled = gate();
      const server = http.createServer(async (req, res) => {
        if (req.url === '/ping') return void res.end('pong');
        // The wrapper's promise, as node:http would drop it; the test waits for it to settle.
        await idempotency
          .handler((_req, response) => {
            response.writeHead(200, { 'content-type': 'text/plain' });
            response.write('partial');
            thrown++;
            throw new Error('failed after writing part of the body');
          })(req, res)
          .catch((error: unknown) => onRejection(error))
          .finally(() => settled.open());
      });
      const running = await listen(server);
      try {
        const outcome = await rawRequest(running.url, {
          method: label === 'GET' ? 'GET' : 'POST',
          path: '/stream',
          headers,
          waitMs: 20_000,
        });
        await settled.wait;
        expect(thrown).toBe(1);
        expect(rejections).toEqual([]);
        expect(outcome).toEqual({ kind: 'closed' });
        const next = await rawRequest(running.url, { method: 'GET', path: '/ping', waitMs: 20_000 });
        expect(next).toMatchObject({ kind: 'response', status: 200, body: 'pong' });
      } finally {
        await running.close();
      }
    },
  );
});
