import { failureGroupId, publishInTransaction } from '@oncely/core';
import { createRelay, PostgresStore, type Relay } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

// `oncely outbox` failure groups on the real PostgreSQL: rows dead-lettered for two
// errors are listed by group, one group is retried (and sent), the other discarded with
// a record of who and when; bad selections get the documented exit codes.

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `cli_outbox_groups_${process.pid}_${Date.now()}`;
let store: PostgresStore;

async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main([...argv, '--schema', schema], {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { DATABASE_URL, ONCELY_OPERATOR: 'alice' },
  });
  return { code, out, err };
}

/** Runs the relay until nothing is pending (bounded only against a hang, see outbox.test.ts). */
async function drain(relay: Relay): Promise<void> {
  const deadline = Date.now() + 150_000;
  while ((await store.outbox.stats()).pending > 0 && Date.now() < deadline) {
    if ((await relay.runOnce()).claimed === 0) await new Promise((r) => setTimeout(r, 20));
  }
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

describe('oncely outbox failure groups', () => {
  // Two causes: a missing queue, and bodies too large (numbers differ, one group).
  const missingQueue = failureGroupId('receipts', 'Error: queue receipts does not exist');
  const tooLarge = failureGroupId('invoices', 'Error: message 1 too large: 1 bytes');

  it('lists, retries one group, discards the other, refuses bad selections', async () => {
    await store.transaction(async (tx) => {
      for (const id of ['r-1', 'r-2']) await publishInTransaction(store, tx, 'receipts', { id }, { id });
      for (const id of ['i-1', 'i-2']) await publishInTransaction(store, tx, 'invoices', { id }, { id });
    });
    let queueExists = false;
    const sent: string[] = [];
    const relay = createRelay({
      store,
      listen: false,
      producers: {
        send: async (messages) =>
          messages.map((m, n) => {
            if (m.destination === 'invoices') {
              const error = new Error(`message ${40 + n} too large: ${9000 + n} bytes`);
              return { ok: false as const, error, permanent: true };
            }
            if (!queueExists) {
              return {
                ok: false as const,
                error: new Error('queue receipts does not exist'),
                permanent: true,
              };
            }
            sent.push(m.id);
            return { ok: true as const };
          }),
      },
    });
    await drain(relay);
    expect((await store.outbox.stats()).failed).toBe(4);

    const listed = await run('outbox');
    expect(listed.code).toBe(0);
    expect(listed.out).toMatch(new RegExp(`${missingQueue}\\s+2\\s+receipts\\s+r-1, r-2`));
    expect(listed.out).toMatch(new RegExp(`${tooLarge}\\s+2\\s+invoices\\s+i-1, i-2`));
    const json = await run('outbox', '--json');
    expect(json.code).toBe(0);
    const parsed = JSON.parse(json.out);
    expect(parsed.stats).toMatchObject({ pending: 0, failed: 4 });
    expect(parsed.groups).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: missingQueue, destination: 'receipts', count: 2, ids: ['r-1', 'r-2'] }),
        expect.objectContaining({ id: tooLarge, destination: 'invoices', count: 2, ids: ['i-1', 'i-2'] }),
      ]),
    );

    // Bad input: usage errors are 2, a selection that is not dead-lettered is 1.
    expect(await run('outbox', '--retry', '--group', missingQueue, '--id', 'r-1')).toMatchObject({ code: 2 });
    expect(await run('outbox', '--retry', '--group', missingQueue, 'r-1')).toMatchObject({ code: 2 });
    expect(await run('outbox', '--retry', '--discard', '--all', '--yes')).toMatchObject({ code: 2 });
    expect(await run('outbox', '--discard', '--group', tooLarge)).toMatchObject({ code: 2 });
    expect(await run('outbox', '--discard', '--yes')).toMatchObject({ code: 2 });
    expect(await run('outbox', '--discard', '--dry-run', '--all', '--yes')).toMatchObject({ code: 2 });
    expect(await run('outbox', '--group', tooLarge)).toMatchObject({ code: 2 });
    const unknown = await run('outbox', '--retry', '--group', 'receipts:00000000');
    expect(unknown).toMatchObject({ code: 1 });
    expect(unknown.err).toContain('receipts:00000000');
    expect((await store.outbox.stats()).failed).toBe(4);

    const dry = await run('outbox', '--retry', '--group', missingQueue, '--dry-run');
    expect(dry).toMatchObject({ code: 0, out: 'would retry 2 dead-lettered row(s): r-1, r-2\n' });
    expect((await store.outbox.stats()).failed).toBe(4);

    const retried = await run('outbox', '--retry', '--group', missingQueue);
    expect(retried).toMatchObject({ code: 0, out: '2 dead-lettered row(s) back to pending: r-1, r-2\n' });
    queueExists = true;
    await drain(relay);
    expect(sent.sort()).toEqual(['r-1', 'r-2']);
    expect(await store.outbox.stats()).toMatchObject({ pending: 0, failed: 2 });

    const discarded = await run('outbox', '--discard', '--group', tooLarge, '--yes');
    expect(discarded).toMatchObject({
      code: 0,
      out: '2 dead-lettered row(s) discarded (recorded as by alice): i-1, i-2\n',
    });
    expect(await store.outbox.stats()).toMatchObject({ pending: 0, failed: 0 });
    const records = await store.outbox.discarded();
    expect(records.map((r) => [r.id, r.destination, r.discardedBy])).toEqual([
      ['i-1', 'invoices', 'alice'],
      ['i-2', 'invoices', 'alice'],
    ]);
    expect(records[0]!.discardedAt.getTime()).toBeGreaterThan(Date.now() - 600_000);
    expect(records[0]!.lastError).toMatch(/too large/);

    // Discarded rows are gone from the dead letters: neither listed nor retried.
    expect((await run('outbox')).out).toContain('(no dead-lettered rows)');
    expect(await run('outbox', '--retry', 'i-1')).toMatchObject({ code: 1 });
    expect(await run('outbox', '--discard', '--id', 'i-1', '--yes')).toMatchObject({ code: 1 });
    await drain(relay);
    expect(sent.sort()).toEqual(['r-1', 'r-2']);
  }, 200_000);
});
