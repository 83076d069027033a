/**
 * A handler that answers after its 504 the way applications answer (`res.status(201).json()`
 * in Express, `res.setHeader(...)` then `res.end()` on node:http, `reply.code().send()` in
 * Fastify): the README promises its writes go nowhere and nothing fails. Setting a header on
 * the already-sent response threw ERR_HTTP_HEADERS_SENT, and Express's final handler answers
 * an error after the headers were sent by destroying the socket: the client's keep-alive
 * connection died under its next request. Real PostgreSQL, node:http, Express 5, Fastify 5.
 */

import type { ServerResponse } from 'node:http';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PostgresStore } from '@oncely/postgres';
import express from 'express';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotentIncomingMessage } from '../src/index.js';
import { HttpIdempotency } from '../src/index.js';
import type { Framework } from './support.js';
import { admin, connectionString, gate, postgresAvailable, uniqueSchema } from './support.js';

const hasPostgres = await postgresAvailable();
const silent = { debug() {}, info() {}, warn() {}, error() {} };
const TIMEOUT_MS = 500;

/** What the late handler met: the error its late answer threw, and its end. */
interface Probe {
  released: ReturnType<typeof gate>;
  finished: ReturnType<typeof gate>;
  error: unknown;
}

/** Waits for the 504 (the signal), then for the test to have it, then answers as apps do. */
async function answerLate(req: IdempotentIncomingMessage, probe: Probe, answer: () => void) {
  await new Promise<void>((resolve) => req.idempotency!.signal.addEventListener('abort', () => resolve()));
  await probe.released.wait;
  try {
    answer();
  } catch (error) {
    probe.error = error;
    throw error;
  } finally {
    probe.finished.open();
  }
}

async function start(framework: Framework, idempotency: HttpIdempotency, probe: Probe) {
  const lateJson = (res: ServerResponse) => {
    res.setHeader('content-type', 'application/json');
    res.statusCode = 201;
    res.end('{"late":true}');
  };
  if (framework === 'fastify') {
    const app = Fastify();
    await app.register(idempotency.fastify());
    app.post('/late', async (request, reply) => {
      await answerLate(request as unknown as IdempotentIncomingMessage, probe, () => {
        reply.code(201).header('x-late', '1').send({ late: true });
      }).catch(() => {});
      return reply;
    });
    app.get('/ping', async () => 'pong');
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    return { url, server: app.server, close: () => app.close() };
  }
  let server: http.Server;
  if (framework === 'express') {
    const app = express();
    app.use(idempotency.express());
    app.post('/late', async (req, res) => {
      await answerLate(req as unknown as IdempotentIncomingMessage, probe, () => {
        res.status(201).set('x-late', '1').json({ late: true });
      });
    });
    app.get('/ping', (_req, res) => {
      res.send('pong');
    });
    server = http.createServer(app);
  } else {
    server = http.createServer(
      idempotency.handler(async (req, res) => {
        if (req.method === 'GET') return void res.end('pong');
        await answerLate(req, probe, () => lateJson(res));
      }),
    );
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function send(
  agent: http.Agent,
  url: string,
  method: string,
  path: string,
  headers: http.OutgoingHttpHeaders,
) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(new URL(path, url), { method, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

describe.skipIf(!hasPostgres)('a handler answering after its 504 with the usual header calls', () => {
  const schema = uniqueSchema('http_late_answer');
  let store: PostgresStore;
  beforeAll(async () => {
    store = new PostgresStore({ connectionString, schema, poolMax: 4 });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  describe.each(['node', 'express', 'fastify'] as const)('%s', (framework) => {
    it.each(['transactional', 'leased'] as const)(
      '%s: the late answer throws nothing, and the keep-alive connection serves the next request',
      async (mode) => {
        const probe: Probe = { released: gate(), finished: gate(), error: undefined };
        const idempotency = new HttpIdempotency({
          store,
          mode,
          scope: 'late',
          handlerTimeoutMs: TIMEOUT_MS,
          logger: silent,
        });
        const running = await start(framework, idempotency, probe);
        let connections = 0;
        running.server.on('connection', () => connections++);
        const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
        try {
          const first = await send(agent, running.url, 'POST', '/late', {
            'idempotency-key': `late-${framework}-${mode}`,
            'content-length': '0',
          });
          expect(first.status).toBe(504);
          probe.released.open();
          await probe.finished.wait;
          // Whatever the framework does with a rejected handler runs before the next turn.
          await new Promise((resolve) => setImmediate(resolve));
          await new Promise((resolve) => setImmediate(resolve));
          expect(probe.error).toBeUndefined();
          const next = await send(agent, running.url, 'GET', '/ping', {});
          expect(next).toEqual({ status: 200, body: 'pong' });
          expect(connections).toBe(1);
        } finally {
          probe.released.open();
          agent.destroy();
          await running.close();
        }
      },
    );
  });
});
