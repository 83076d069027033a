/**
 * No request goes unanswered: every way a handler can end (or not) ends in a response, or
 * in a clean socket close when the client itself left, within `handlerTimeoutMs` plus a
 * stated margin; and its writes are committed with the stored response or rolled back
 * with it, never half. Real PostgreSQL, node:http, Express 5 and Fastify 5.
 *
 * The margin (`MARGIN_MS`) is an outer bound for a busy machine, not a speed assertion: the
 * tests assert on what came back and on the rows, never on how long it took.
 */
import type http from 'node:http';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { SqlClient } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { TcpProxy } from '@oncely/testkit';
import express from 'express';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotentIncomingMessage } from '../src/index.js';
import { HttpIdempotency } from '../src/index.js';
import type { Framework, RawOutcome, RunningServer } from './support.js';
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
const frameworks: Framework[] = ['node', 'express', 'fastify'];
const silent = { debug() {}, info() {}, warn() {}, error() {} };

/** Budget of the handlers that are meant to run out of time. */
const SHORT_TIMEOUT_MS = 1000;
/** Budget of the handlers that are meant to finish: far above what they need on a busy machine. */
const LONG_TIMEOUT_MS = 20_000;
/** The stated margin: every exchange must end within its handlerTimeoutMs plus this. */
const MARGIN_MS = 20_000;

type Mode = 'transactional' | 'leased';

/** What the handlers share with the tests: gates by order ID, and what each handler saw. */
interface Probe {
  gates: Map<string, ReturnType<typeof gate>>;
  /** Order IDs whose handler got past its `await pipeline(...)` / `await` of the end callback. */
  resumed: Set<string>;
  /** Errors handlers met after the request was answered (late writes, late statements). */
  late: Map<string, unknown>;
}

function newProbe(): Probe {
  return { gates: new Map(), resumed: new Set(), late: new Map() };
}

function gateFor(probe: Probe, id: string): ReturnType<typeof gate> {
  let g = probe.gates.get(id);
  if (!g) {
    g = gate();
    probe.gates.set(id, g);
  }
  return g;
}

/** The handler's write: through the key's transaction, or (leased mode) a transaction of its own. */
async function insertOrder(store: PostgresStore, schema: string, tx: SqlClient | undefined, id: string) {
  const sql = `INSERT INTO "${schema}".orders (id) VALUES ($1)`;
  if (tx) await tx.query(sql, [id]);
  else await store.transaction((own) => own.query(sql, [id]));
}

const never = () => new Promise<never>(() => {});
const afterAbort = (signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });

/**
 * The scenarios on a Node `ServerResponse` (the node:http wrapper and Express share it).
 * `x-scenario` picks one, `x-order-id` names the row it writes.
 */
async function serverResponseScenario(
  ctx: { store: PostgresStore; schema: string; probe: Probe },
  req: IdempotentIncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const id = String(req.headers['x-order-id']);
  const scenario = String(req.headers['x-scenario']);
  await insertOrder(ctx.store, ctx.schema, req.tx, id);
  switch (scenario) {
    case 'ok':
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id }));
      return;
    case 'hang':
      return never();
    case 'late': {
      // Answers long after its budget: the late answer must go nowhere and crash nothing.
      await afterAbort(req.idempotency!.signal);
      try {
        res.writeHead(201, { 'content-type': 'application/json' });
        res.write('{"late":');
        await new Promise<void>((resolve) => res.end('true}', () => resolve()));
      } catch (error) {
        ctx.probe.late.set(id, error);
      }
      ctx.probe.resumed.add(id);
      return;
    }
    case 'throw-partial':
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial');
      throw new Error('failed after writing part of the body');
    case 'pipeline':
      res.writeHead(201, { 'content-type': 'text/plain' });
      await pipeline(Readable.from(['a', 'b', 'c']), res);
      ctx.probe.resumed.add(id);
      return;
    case 'end-callback':
      res.writeHead(201, { 'content-type': 'text/plain' });
      await new Promise<void>((resolve) => res.end('done', () => resolve()));
      ctx.probe.resumed.add(id);
      return;
    case 'gate':
      gateFor(ctx.probe, id).enter();
      await gateFor(ctx.probe, id).wait;
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id }));
      return;
    case 'too-large':
      // Three chunks of 600 bytes against maxResponseBytes 1024.
      res.writeHead(201, { 'content-type': 'text/plain' });
      res.write('x'.repeat(600));
      res.write('y'.repeat(600));
      await new Promise<void>((resolve) => res.end('z'.repeat(600), () => resolve()));
      ctx.probe.resumed.add(id);
      return;
    default:
      throw new Error(`unknown scenario ${scenario}`);
  }
}

/** The same scenarios the Fastify way (a stream is `reply.send(stream)`, `await reply` waits for the end). */
async function fastifyScenario(
  ctx: { store: PostgresStore; schema: string; probe: Probe },
  request: any,
  reply: any,
): Promise<unknown> {
  const id = String(request.headers['x-order-id']);
  const scenario = String(request.headers['x-scenario']);
  await insertOrder(ctx.store, ctx.schema, request.tx ?? undefined, id);
  switch (scenario) {
    case 'ok':
      return reply.code(201).send({ id });
    case 'hang':
      return never();
    case 'late':
      await afterAbort(request.idempotency.signal);
      ctx.probe.resumed.add(id);
      return reply.code(201).send({ late: true });
    case 'throw-partial': {
      // Fastify's way to have written part of a body: a stream that fails midway.
      const failing = new Readable({
        read() {
          this.push('partial');
          this.destroy(new Error('failed after writing part of the body'));
        },
      });
      return reply.code(200).type('text/plain').send(failing);
    }
    case 'pipeline':
      return reply
        .code(201)
        .type('text/plain')
        .send(Readable.from(['a', 'b', 'c']));
    case 'end-callback':
      reply.code(201).type('text/plain').send('done');
      await reply;
      ctx.probe.resumed.add(id);
      return reply;
    case 'gate':
      gateFor(ctx.probe, id).enter();
      await gateFor(ctx.probe, id).wait;
      return reply.code(201).send({ id });
    case 'too-large':
      return reply
        .code(201)
        .type('text/plain')
        .send(Readable.from(['x'.repeat(600), 'y'.repeat(600), 'z'.repeat(600)]));
    default:
      throw new Error(`unknown scenario ${scenario}`);
  }
}

type Running = RunningServer;

async function startScenarioServer(
  framework: Framework,
  idempotency: HttpIdempotency,
  ctx: { store: PostgresStore; schema: string; probe: Probe },
): Promise<Running> {
  if (framework === 'fastify') {
    const app = Fastify();
    await app.register(idempotency.fastify());
    app.post('/orders', (request, reply) => fastifyScenario(ctx, request, reply));
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    return { url, close: () => app.close() };
  }
  let server: http.Server;
  const { createServer } = await import('node:http');
  if (framework === 'express') {
    const app = express();
    app.use(idempotency.express());
    app.post('/orders', (req, res) => serverResponseScenario(ctx, req as IdempotentIncomingMessage, res));
    server = createServer(app);
  } else {
    server = createServer(idempotency.handler((req, res) => serverResponseScenario(ctx, req, res)));
  }
  return listen(server);
}

async function openScenarioStore(schema: string, url = connectionString): Promise<PostgresStore> {
  const store = new PostgresStore({ connectionString: url, schema, poolMax: 8, connectTimeoutMs: 2000 });
  await store.migrate();
  await store.transaction((tx) =>
    tx.query(`CREATE TABLE IF NOT EXISTS "${schema}".orders (id text PRIMARY KEY)`),
  );
  return store;
}

async function ordersWithId(schema: string, id: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${schema}".orders WHERE id = $1`,
    [id],
  );
  return rows[0]!.n;
}

async function keyRow(
  schema: string,
  key: string,
): Promise<{ status: string; response_status: number | null } | undefined> {
  const { rows } = await admin.query(
    `SELECT status, response_status FROM "${schema}".http_idempotency_keys WHERE idempotency_key = $1`,
    [key],
  );
  return rows[0];
}

function order(
  url: string,
  key: string,
  id: string,
  scenario: string,
  waitMs: number,
  disconnect?: Promise<unknown>,
) {
  return rawRequest(url, {
    headers: { 'idempotency-key': key, 'x-order-id': id, 'x-scenario': scenario, 'content-length': '0' },
    waitMs,
    disconnect,
  });
}

function statusOf(outcome: RawOutcome): number | string {
  return outcome.kind === 'response' ? outcome.status : outcome.kind;
}

describe.skipIf(!hasPostgres)('no request goes unanswered (real PostgreSQL)', () => {
  describe.each(['transactional', 'leased'] as const)('%s mode', (mode: Mode) => {
    describe.each(frameworks)('%s', (framework) => {
      const schema = uniqueSchema(`http_unanswered_${framework}_${mode.slice(0, 2)}`);
      const probe = newProbe();
      let store: PostgresStore;
      /** Handlers meant to run out of time. */
      let short: Running;
      /** Handlers meant to finish. */
      let long: Running;
      const wait = (budget: number) => budget + MARGIN_MS;
      const leaseMs = 2000;

      beforeAll(async () => {
        store = await openScenarioStore(schema);
        const ctx = { store, schema, probe };
        const base = { store, mode, scope: () => 'tests', leaseMs, maxResponseBytes: 1024, logger: silent };
        short = await startScenarioServer(
          framework,
          new HttpIdempotency({ ...base, handlerTimeoutMs: SHORT_TIMEOUT_MS }),
          ctx,
        );
        long = await startScenarioServer(
          framework,
          new HttpIdempotency({ ...base, handlerTimeoutMs: LONG_TIMEOUT_MS }),
          ctx,
        );
      });
      afterAll(async () => {
        for (const g of probe.gates.values()) g.open();
        await short?.close();
        await long?.close();
        await store?.close();
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      });

      it('a handler that never answers gets a 504 at handlerTimeoutMs', async () => {
        const outcome = await order(short.url, 'hang', 'hang', 'hang', wait(SHORT_TIMEOUT_MS));
        expect(statusOf(outcome)).toBe(504);
        if (outcome.kind === 'response') {
          expect(outcome.headers['content-type']).toBe('application/problem+json');
        }
        if (mode === 'transactional') {
          // Its write rolled back with the key: the retry runs at once, once.
          expect(await ordersWithId(schema, 'hang')).toBe(0);
          const retry = await order(long.url, 'hang', 'hang', 'ok', wait(LONG_TIMEOUT_MS));
          expect(statusOf(retry)).toBe(201);
          expect(await ordersWithId(schema, 'hang')).toBe(1);
        } else {
          // Leased: the claim is not renewed past the budget; it stays in progress until its
          // deadline on the database clock (the handler may still be running), as after a crash.
          expect((await keyRow(schema, 'hang'))?.status).toBe('in_progress');
          const early = await order(long.url, 'hang', 'hang-2', 'ok', wait(LONG_TIMEOUT_MS));
          expect(statusOf(early)).toBe(409);
        }
      });

      it('a handler that answers after its 504 changes nothing and crashes nothing', async () => {
        const outcome = await order(short.url, 'late', 'late', 'late', wait(SHORT_TIMEOUT_MS));
        expect(statusOf(outcome)).toBe(504);
        await expect.poll(() => probe.resumed.has('late'), { timeout: MARGIN_MS }).toBe(true);
        if (mode === 'transactional') expect(await ordersWithId(schema, 'late')).toBe(0);
        // The server still serves.
        const next = await order(long.url, 'after-late', 'after-late', 'ok', wait(LONG_TIMEOUT_MS));
        expect(statusOf(next)).toBe(201);
      });

      it('a handler that throws after writing part of the body gets a 500, its writes rolled back', async () => {
        const outcome = await order(long.url, 'partial', 'partial', 'throw-partial', wait(LONG_TIMEOUT_MS));
        expect(statusOf(outcome)).toBe(500);
        if (mode === 'transactional') expect(await ordersWithId(schema, 'partial')).toBe(0);
        // A failure is not stored (failures: 'rerun'): the key is free for the retry.
        expect((await keyRow(schema, 'partial'))?.status).toBeUndefined();
      });

      it('a streamed response completes, the handler resumes after it, and it is replayed byte for byte', async () => {
        const outcome = await order(long.url, 'piped', 'piped', 'pipeline', wait(LONG_TIMEOUT_MS));
        expect(statusOf(outcome)).toBe(201);
        expect(outcome.kind === 'response' && outcome.body).toBe('abc');
        if (framework !== 'fastify') {
          await expect.poll(() => probe.resumed.has('piped'), { timeout: MARGIN_MS }).toBe(true);
        }
        expect(await ordersWithId(schema, 'piped')).toBe(1);
        const replay = await order(long.url, 'piped', 'piped', 'pipeline', wait(LONG_TIMEOUT_MS));
        expect(replay.kind === 'response' && replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.kind === 'response' && replay.body).toBe('abc');
        expect(await ordersWithId(schema, 'piped')).toBe(1);
      });

      it("a handler awaiting its response's end resumes after it", async () => {
        const outcome = await order(long.url, 'ended', 'ended', 'end-callback', wait(LONG_TIMEOUT_MS));
        expect(statusOf(outcome)).toBe(201);
        expect(outcome.kind === 'response' && outcome.body).toBe('done');
        await expect.poll(() => probe.resumed.has('ended'), { timeout: MARGIN_MS }).toBe(true);
        expect(await ordersWithId(schema, 'ended')).toBe(1);
      });

      it('a response larger than maxResponseBytes is a 500, its writes rolled back, and the handler resumes', async () => {
        const outcome = await order(long.url, 'big', 'big', 'too-large', wait(LONG_TIMEOUT_MS));
        expect(statusOf(outcome)).toBe(500);
        expect(outcome.kind === 'response' && JSON.parse(outcome.body).title).toBe(
          'The response is too large to store for replay',
        );
        if (framework !== 'fastify') {
          await expect.poll(() => probe.resumed.has('big'), { timeout: MARGIN_MS }).toBe(true);
        }
        if (mode === 'transactional') expect(await ordersWithId(schema, 'big')).toBe(0);
        expect(await keyRow(schema, 'big')).toBeUndefined();
      });

      it('a client that disconnects mid-handler: the handler completes, commits once, and the retry is a replay', async () => {
        const g = gateFor(probe, 'left');
        const outcome = order(long.url, 'left', 'left', 'gate', wait(LONG_TIMEOUT_MS), g.entered);
        expect(statusOf(await outcome)).toBe('closed');
        g.open();
        await expect
          .poll(async () => (await keyRow(schema, 'left'))?.status, { timeout: MARGIN_MS })
          .toBe('completed');
        expect(await ordersWithId(schema, 'left')).toBe(1);
        const retry = await order(long.url, 'left', 'left', 'gate', wait(LONG_TIMEOUT_MS));
        expect(statusOf(retry)).toBe(201);
        expect(retry.kind === 'response' && retry.headers['idempotent-replayed']).toBe('true');
        expect(await ordersWithId(schema, 'left')).toBe(1);
      });
    });
  });

  describe.each(frameworks)('%s: the store goes down mid-handler (TCP proxy cut)', (framework) => {
    const schema = uniqueSchema(`http_outage_${framework}`);
    const probe = newProbe();
    const proxy = new TcpProxy({ host: '127.0.0.1', port: Number(new URL(connectionString).port || 5432) });
    let store: PostgresStore;
    let server: Running;

    beforeAll(async () => {
      const port = await proxy.start();
      const viaProxy = new URL(connectionString);
      viaProxy.port = String(port);
      store = await openScenarioStore(schema, viaProxy.toString());
      server = await startScenarioServer(
        framework,
        new HttpIdempotency({
          store,
          scope: () => 'tests',
          handlerTimeoutMs: LONG_TIMEOUT_MS,
          logger: silent,
        }),
        { store, schema, probe },
      );
    });
    afterAll(async () => {
      for (const g of probe.gates.values()) g.open();
      await server?.close();
      await store?.close();
      await proxy.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    });

    it('answers 503 (never the handler success), commits nothing, and the retry after the outage runs once', async () => {
      const g = gateFor(probe, 'cut');
      const outcome = order(server.url, 'cut', 'cut', 'gate', LONG_TIMEOUT_MS + MARGIN_MS);
      await g.entered;
      await proxy.cut();
      g.open();
      expect(statusOf(await outcome)).toBe(503);
      expect(await ordersWithId(schema, 'cut')).toBe(0);
      expect(await keyRow(schema, 'cut')).toBeUndefined();
      await proxy.resume();
      // The store reconnects on its own; the retry is a first run, not a replay.
      let retry: RawOutcome;
      for (;;) {
        retry = await order(server.url, 'cut', 'cut', 'ok', LONG_TIMEOUT_MS + MARGIN_MS);
        if (statusOf(retry) !== 503) break;
        await admin.query('SELECT pg_sleep(0.1)');
      }
      expect(statusOf(retry)).toBe(201);
      expect(retry.kind === 'response' && retry.headers['idempotent-replayed']).toBeUndefined();
      expect(await ordersWithId(schema, 'cut')).toBe(1);
    });
  });
});
