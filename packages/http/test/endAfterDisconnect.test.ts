import http from 'node:http';
import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import type { RunningServer } from './support.js';
import {
  admin,
  gate,
  listen,
  openStore,
  post,
  postgresAvailable,
  rawRequest,
  uniqueSchema,
} from './support.js';

const hasPostgres = await postgresAvailable();
const silent = { debug() {}, info() {}, warn() {}, error() {} };

// Issue 27 follow-up: a node:http handler that awaits `res.end`'s callback after its client
// left. The real response never emits 'finish' then (its socket is gone), so a callback
// tied to 'finish' alone never runs and the handler hangs forever.
describe.skipIf(!hasPostgres)('node:http: awaiting the end callback after the client disconnected', () => {
  const schema = uniqueSchema('http_endcb');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('postgres', schema);
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  async function serve(
    mode: 'transactional' | 'leased',
    held: ReturnType<typeof gate>,
    seen: { resumed: string[]; callbackError: unknown[] },
  ): Promise<RunningServer> {
    const idempotency = new HttpIdempotency({ store, mode, scope: 'tests', logger: silent });
    return listen(
      http.createServer(
        idempotency.handler(async (req, res) => {
          const id = JSON.parse(req.rawBody!.toString()).id as string;
          const insert = `INSERT INTO "${schema}".orders (id) VALUES ($1)`;
          if (req.tx) await req.tx.query(insert, [id]);
          else await store.transaction((tx) => tx.query(insert, [id]));
          held.enter();
          await held.wait;
          res.writeHead(201, { 'content-type': 'application/json' });
          // @types/node types the callback without an argument; the wrapper passes the reason.
          const error = await new Promise<unknown>((resolve) =>
            res.end('{"ok":true}', resolve as () => void),
          );
          seen.callbackError.push(error);
          seen.resumed.push(id);
        }),
      ),
    );
  }

  it.each(['transactional', 'leased'] as const)(
    '%s: the handler resumes, its key is settled once (committed with its write), and the retry replays',
    async (mode) => {
      const held = gate();
      const seen = { resumed: [] as string[], callbackError: [] as unknown[] };
      const server = await serve(mode, held, seen);
      const id = `left-${mode}`;
      try {
        const outcome = await rawRequest(server.url, {
          headers: { 'content-type': 'application/json', 'idempotency-key': id },
          body: JSON.stringify({ id }),
          disconnect: held.entered,
          waitMs: 20_000,
        });
        expect(outcome.kind).toBe('closed');
        held.open();
        // Waits on the handler's own progress; the bound is an outer limit for a busy machine.
        await expect.poll(() => seen.resumed, { timeout: 15_000 }).toEqual([id]);
        expect(seen.callbackError[0]).toMatchObject({ code: 'HTTP_CLIENT_GONE' });
        const { rows } = await admin.query(
          `SELECT count(*)::int AS n FROM "${schema}".orders WHERE id = $1`,
          [id],
        );
        expect(rows[0].n).toBe(1);
        const retry = await post(server.url, { id }, { 'idempotency-key': id });
        expect(retry.status).toBe(201);
        expect(retry.headers.get('idempotent-replayed')).toBe('true');
      } finally {
        held.open();
        await server.close();
      }
    },
  );
});
