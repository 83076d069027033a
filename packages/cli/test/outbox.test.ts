import { publishInTransaction } from '@oncely/core';
import { createRelay, PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

// `oncely outbox` on the real PostgreSQL: the lag, the stuck rows and --retry.

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `cli_outbox_${process.pid}_${Date.now()}`;
let store: PostgresStore;

async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { DATABASE_URL },
  });
  return { code, out, err };
}

beforeAll(async () => {
  store = new PostgresStore({ connectionString: DATABASE_URL, schema });
  await store.migrate();
});
afterAll(async () => {
  await store.close();
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
});

describe('oncely outbox', () => {
  it('shows the lag and the stuck rows, and --retry sends dead-lettered rows again', async () => {
    await store.transaction(async (tx) => {
      await publishInTransaction(store, tx, 'receipts', { n: 1 }, { id: 'poison-1', key: 'K' });
      await publishInTransaction(store, tx, 'receipts', { n: 2 }, { id: 'waiting-2' });
    });
    const empty = await run('outbox', '--schema', schema);
    expect(empty.code).toBe(0);
    expect(empty.out).toMatch(/^pending 2 {2}dead-lettered 0 {2}lag \d/);
    expect(empty.out).toContain('(no stuck rows)');

    let broken = true;
    const relay = createRelay({
      store,
      listen: false,
      producers: {
        send: async (messages) =>
          messages.map((m) =>
            broken && m.id === 'poison-1'
              ? { ok: false as const, error: new Error('queue receipts does not exist'), permanent: true }
              : { ok: true as const },
          ),
      },
    });
    // Bounded only against a hang: the relay sends rows below the cluster-wide snapshot
    // xmin, and another suite's session cut off mid-transaction holds them back until its
    // idle_in_transaction_session_timeout (60 s) ends it.
    const deadline = Date.now() + 150_000;
    while ((await store.outbox.stats()).pending > 0 && Date.now() < deadline) {
      if ((await relay.runOnce()).claimed === 0) await new Promise((r) => setTimeout(r, 20));
    }
    const stuck = await run('outbox', '--schema', schema);
    expect(stuck.out).toMatch(/^pending 0 {2}dead-lettered 1 {2}lag -/);
    expect(stuck.out).toMatch(
      /poison-1\s+receipts\s+K\s+dead-lettered\s+1\s+Error: queue receipts does not exist/,
    );

    expect(await run('outbox', '--retry', 'nope', '--schema', schema)).toMatchObject({ code: 1 });
    const retried = await run('outbox', '--retry', '--schema', schema);
    expect(retried).toMatchObject({ code: 0, out: '1 dead-lettered row(s) back to pending: poison-1\n' });
    broken = false;
    while ((await store.outbox.stats()).pending > 0 && Date.now() < deadline) {
      if ((await relay.runOnce()).claimed === 0) await new Promise((r) => setTimeout(r, 20));
    }
    expect((await run('outbox', '--schema', schema)).out).toMatch(/^pending 0 {2}dead-lettered 0/);
  }, 200_000);

  it('refuses bad usage', async () => {
    expect((await run('outbox', 'stray', '--schema', schema)).code).toBe(2);
    expect((await run('outbox', '--limit', '0', '--schema', schema)).code).toBe(2);
  });
});
