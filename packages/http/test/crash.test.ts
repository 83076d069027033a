import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpIdempotency } from '../src/index.js';
import {
  admin,
  connectionString,
  openStore,
  post,
  postgresAvailable,
  startServer,
  uniqueSchema,
} from './support.js';

const hasPostgres = await postgresAvailable();
const fixture = fileURLToPath(new URL('./fixtures/crashingServer.mjs', import.meta.url));

/** Starts the crashing server in its own process and resolves once it listens. */
async function startChild(schema: string, mode: string, leaseMs: number) {
  if (!existsSync(fileURLToPath(new URL('../dist/index.js', import.meta.url)))) {
    throw new Error('build @oncely/http first (npx tsc -b packages/http): the child process runs dist/');
  }
  const child = spawn(process.execPath, [fixture, connectionString, schema, mode, String(leaseMs)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    lines.push(...chunk.split('\n').filter(Boolean));
    for (const wake of waiters.splice(0)) wake();
  });
  const waitLine = async (prefix: string) => {
    for (;;) {
      const line = lines.find((l) => l.startsWith(prefix));
      if (line) return line;
      if (child.exitCode !== null) throw new Error(`child exited with ${child.exitCode}`);
      await new Promise<void>((resolve) => waiters.push(resolve));
    }
  };
  const port = Number((await waitLine('port ')).slice(5));
  return { child, url: `http://127.0.0.1:${port}`, waitLine };
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

describe.skipIf(!hasPostgres)('a crash of the first request (real PostgreSQL, SIGKILL)', () => {
  const schema = uniqueSchema('http_crash');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('postgres', schema);
    await new HttpIdempotency({ store, scope: 'tests' }).migrate();
  });
  afterAll(async () => {
    await store?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });

  it('leased: the key stays in progress (409) until its database-time deadline, then a retry takes it over', async () => {
    // Long enough that the 409 below comes before the deadline even on a loaded machine.
    const leaseMs = 5000;
    const { child, url, waitLine } = await startChild(schema, 'leased', leaseMs);
    const crashed = post(url, { id: 'L' }, { 'idempotency-key': 'leased-crash' }).catch(
      () => 'connection lost',
    );
    await waitLine('entered');
    await kill(child);
    expect(await crashed).toBe('connection lost');

    const idempotency = new HttpIdempotency({ store, mode: 'leased', leaseMs, scope: 'tests' });
    let runs = 0;
    const server = await startServer('express', idempotency, async () => {
      runs++;
      return { status: 201, body: { took: 'over' } };
    });
    try {
      const early = await post(server.url, { id: 'L' }, { 'idempotency-key': 'leased-crash' });
      expect(early.status).toBe(409);
      // The claim's own deadline, on the database clock.
      const { rows } = await admin.query<{ wait: number }>(
        `SELECT greatest(0, extract(epoch FROM locked_until - now()) * 1000)::int AS wait
         FROM "${schema}".http_idempotency_keys WHERE idempotency_key = 'leased-crash'`,
      );
      expect(rows[0]!.wait).toBeGreaterThan(0);
      await admin.query('SELECT pg_sleep($1::double precision / 1000)', [rows[0]!.wait + 50]);
      const takeover = await post(server.url, { id: 'L' }, { 'idempotency-key': 'leased-crash' });
      expect(takeover.status).toBe(201);
      expect(await takeover.json()).toEqual({ took: 'over' });
      const replay = await post(server.url, { id: 'L' }, { 'idempotency-key': 'leased-crash' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(runs).toBe(1);
    } finally {
      await server.close();
    }
  });

  it('transactional: the crash rolls back the write and the key together, so a retry runs at once, once', async () => {
    const { child, url, waitLine } = await startChild(schema, 'transactional', 30_000);
    const crashed = post(url, { id: 'T' }, { 'idempotency-key': 'tx-crash' }).catch(() => 'connection lost');
    await waitLine('entered');
    await kill(child);
    await crashed;

    const idempotency = new HttpIdempotency({ store, scope: 'tests' });
    let runs = 0;
    const server = await startServer('fastify', idempotency, async ({ tx }) => {
      runs++;
      await tx!.query(`INSERT INTO "${schema}".orders (id) VALUES ('crash')`);
      return { status: 201, body: { ok: true } };
    });
    try {
      // The server notices the dead client when its socket closes; until then the key's
      // lock is held and the answer is 409.
      let response: Response;
      for (;;) {
        response = await post(server.url, { id: 'T' }, { 'idempotency-key': 'tx-crash' });
        if (response.status !== 409) break;
        await admin.query('SELECT pg_sleep(0.05)');
      }
      expect(response.status).toBe(201);
      expect(runs).toBe(1);
      const { rows } = await admin.query(
        `SELECT count(*)::int AS n FROM "${schema}".orders WHERE id = 'crash'`,
      );
      expect(rows[0].n).toBe(1);
    } finally {
      await server.close();
    }
  });
});
