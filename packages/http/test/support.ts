import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { SqlClient } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import express from 'express';
import Fastify from 'fastify';
import pg from 'pg';
import type { HttpIdempotency, IdempotentIncomingMessage } from '../src/index.js';

export const connectionString = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A small pool for test-side SQL. */
export const admin = new pg.Pool({ connectionString, max: 3 });
admin.on('error', () => {});

/**
 * True when PostgreSQL answers. Under CI=true a missing server fails the run (the same
 * rule as `requireService` in @oncely/testkit, which this package does not depend on).
 */
export async function postgresAvailable(): Promise<boolean> {
  try {
    await admin.query('SELECT 1');
    return true;
  } catch (error) {
    if (process.env.CI === 'true') throw new Error('PostgreSQL is required under CI=true', { cause: error });
    console.warn(`[oncely http tests] PostgreSQL not reachable (${(error as Error).message}); skipping`);
    return false;
  }
}

export function uniqueSchema(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
}

export type StoreKind = 'postgres' | 'pglite';

/** A migrated store with an `orders` table for the handlers' effects. */
export async function openStore(kind: StoreKind, schema: string): Promise<PostgresStore> {
  const store =
    kind === 'postgres'
      ? new PostgresStore({ connectionString, schema, poolMax: 12 })
      : PostgresStore.embedded({ schema });
  await store.migrate();
  await store.transaction((tx) =>
    tx.query(`CREATE TABLE IF NOT EXISTS "${schema}".orders (id text PRIMARY KEY, amount integer)`),
  );
  return store;
}

export async function countOrders(store: PostgresStore, schema: string): Promise<number> {
  const { rows } = await store.transaction((tx) =>
    tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".orders`),
  );
  return rows[0]!.n;
}

/** The business logic every framework binding serves: POST /orders. */
export type AppLogic = (call: {
  tx: SqlClient | undefined;
  body: { id?: string; amount?: number } | undefined;
  headers: http.IncomingHttpHeaders;
}) => Promise<{ status: number; body: unknown }>;

export type Framework = 'node' | 'express' | 'fastify';

export interface RunningServer {
  url: string;
  close(): Promise<void>;
}

export async function startServer(
  framework: Framework,
  idempotency: HttpIdempotency,
  logic: AppLogic,
): Promise<RunningServer> {
  if (framework === 'fastify') {
    const app = Fastify();
    await app.register(idempotency.fastify());
    const route = async (request: any, reply: any) => {
      const result = await logic({
        tx: request.tx ?? undefined,
        body: request.body,
        headers: request.headers,
      });
      return reply.code(result.status).header('x-handler', 'yes').send(result.body);
    };
    app.post('/orders', route);
    app.get('/orders', route);
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    return { url: address, close: () => app.close() };
  }
  let server: http.Server;
  if (framework === 'express') {
    const app = express();
    app.use(express.json(), idempotency.express());
    const route = async (req: any, res: any) => {
      const result = await logic({ tx: req.tx, body: req.body, headers: req.headers });
      res.status(result.status).set('x-handler', 'yes').json(result.body);
    };
    app.post('/orders', route);
    app.get('/orders', route);
    server = http.createServer(app);
  } else {
    server = http.createServer(
      idempotency.handler(async (req: IdempotentIncomingMessage, res) => {
        const text = req.rawBody?.toString('utf8') ?? '';
        const result = await logic({
          tx: req.tx,
          body: text ? JSON.parse(text) : undefined,
          headers: req.headers,
        });
        res.writeHead(result.status, {
          'content-type': 'application/json; charset=utf-8',
          'x-handler': 'yes',
        });
        res.end(JSON.stringify(result.body));
      }),
    );
  }
  return listen(server);
}

/** Listens on an ephemeral port of 127.0.0.1; `close` drops open connections first. */
export async function listen(server: http.Server): Promise<RunningServer> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** A gate a handler waits on, so a test decides when the first request finishes. */
export function gate(): { wait: Promise<void>; open(): void; entered: Promise<void>; enter(): void } {
  let open!: () => void;
  let enter!: () => void;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  const entered = new Promise<void>((resolve) => {
    enter = resolve;
  });
  return { wait, open, entered, enter };
}

/** What a raw HTTP exchange ended in: a response, the server closing the socket, or nothing in time. */
export type RawOutcome =
  | { kind: 'response'; status: number; headers: http.IncomingHttpHeaders; body: string }
  | { kind: 'closed' }
  | { kind: 'no-response' };

/**
 * One request on its own connection through node:http, so a test can send a header field
 * twice (an array value is sent as two field lines), disconnect mid-request (`disconnect`
 * resolves), and bound the wait (`waitMs`: an outer limit, not an assertion on speed).
 */
export function rawRequest(
  url: string,
  options: {
    method?: string;
    path?: string;
    headers?: http.OutgoingHttpHeaders;
    body?: string | Buffer;
    waitMs?: number;
    disconnect?: Promise<unknown>;
  } = {},
): Promise<RawOutcome> {
  const target = new URL(options.path ?? '/orders', url);
  return new Promise<RawOutcome>((resolve) => {
    let settled = false;
    const done = (outcome: RawOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    const req = http.request(
      target,
      { method: options.method ?? 'POST', headers: options.headers, agent: false },
      (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          done({
            kind: 'response',
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', () => done({ kind: 'closed' }));
        // Cut mid-body: the server closed the socket after the head.
        res.on('close', () => {
          if (!res.complete) done({ kind: 'closed' });
        });
      },
    );
    let answered = false;
    const timer = setTimeout(() => {
      done({ kind: 'no-response' });
      req.destroy();
    }, options.waitMs ?? 30_000);
    req.on('error', () => done({ kind: 'closed' }));
    req.on('close', () => {
      if (!answered) done({ kind: 'closed' });
    });
    void options.disconnect?.then(() => req.destroy());
    req.end(options.body);
  });
}
