/**
 * The outbox's dead letters as a library (`store.outbox.deadLetters`, `retryDeadLetters`,
 * `discard`, `discarded`), what `oncely outbox` is a thin layer over. Rows are
 * dead-lettered here by SQL (the relay's part is covered in outbox.server.test.ts and the
 * CLI's outboxGroups.test.ts); what is checked is grouping, selection and the record.
 */
import { failureGroupId, isOncelyError, publishInTransaction } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, stores } = cleanupAfterFile();

async function seeded(): Promise<{ store: PostgresStore; schema: string }> {
  const schema = uniqueSchema('outbox_dl');
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
  stores.push(store);
  await store.migrate();
  await store.transaction(async (tx) => {
    for (const id of ['a-1', 'a-2', 'b-1', 'live']) {
      await publishInTransaction(store, tx, id.startsWith('a') ? 'alpha' : 'beta', { id }, { id });
    }
  });
  const fail = `UPDATE "${schema}".outbox SET status = 'failed', attempts = 3, last_error = $2 WHERE id = $1`;
  await admin.query(fail, ['a-1', 'Error: timeout after 5000 ms']);
  await admin.query(fail, ['a-2', 'Error: timeout after 7000 ms']);
  await admin.query(fail, ['b-1', 'Error: timeout after 5000 ms']);
  return { store, schema };
}

function configError(error: unknown): boolean {
  return isOncelyError(error, 'CONFIG_INVALID');
}

describe.skipIf(!hasPostgres)('outbox dead letters (library)', () => {
  const alpha = failureGroupId('alpha', 'Error: timeout after 1 ms');
  const beta = failureGroupId('beta', 'Error: timeout after 1 ms');

  it('groups by destination and masked error, retries by group or destination, dry run first', async () => {
    const { store } = await seeded();
    const { rows, groups } = await store.outbox.deadLetters();
    expect(rows.map((r) => [r.id, r.group])).toEqual([
      ['a-1', alpha],
      ['a-2', alpha],
      ['b-1', beta],
    ]);
    expect(groups).toEqual([
      { id: alpha, destination: 'alpha', error: 'Error: timeout after # ms', count: 2, ids: ['a-1', 'a-2'] },
      { id: beta, destination: 'beta', error: 'Error: timeout after # ms', count: 1, ids: ['b-1'] },
    ]);

    expect(await store.outbox.retryDeadLetters({ group: alpha }, { dryRun: true })).toEqual({
      dryRun: true,
      retried: ['a-1', 'a-2'],
      notFound: [],
    });
    expect((await store.outbox.stats()).failed).toBe(3);
    expect(await store.outbox.retryDeadLetters({ group: 'beta' })).toEqual({
      dryRun: false,
      retried: ['b-1'],
      notFound: [],
    });
    expect(await store.outbox.retryDeadLetters({ group: 'nope:00000000' })).toMatchObject({
      retried: [],
      notFound: ['nope:00000000'],
    });
    expect(await store.outbox.retryDeadLetters({ ids: ['a-2', 'live'] })).toMatchObject({
      retried: ['a-2'],
      notFound: ['live'],
    });
    expect(await store.outbox.stats()).toMatchObject({ pending: 3, failed: 1 });
    await expect(store.outbox.retryDeadLetters({ ids: ['a-1'], group: alpha })).rejects.toSatisfy(
      configError,
    );
  });

  it('discards only with a selection, records who and when, and never sends or retries it', async () => {
    const { store, schema } = await seeded();
    await expect(store.outbox.discard({}, { by: 'ops' })).rejects.toSatisfy(configError);
    await expect(store.outbox.discard({ all: true }, { by: '' })).rejects.toThrow(/who discards/);
    expect((await store.outbox.stats()).failed).toBe(3);

    expect(await store.outbox.discard({ group: alpha }, { by: 'ops' })).toEqual({
      discarded: ['a-1', 'a-2'],
      notFound: [],
      by: 'ops',
    });
    expect(await store.outbox.discard({ ids: ['a-1', 'live'] }, { by: 'ops' })).toMatchObject({
      discarded: [],
      notFound: ['a-1', 'live'],
    });
    const records = await store.outbox.discarded();
    expect(records.map((r) => [r.id, r.destination, r.discardedBy, r.lastError])).toEqual([
      ['a-1', 'alpha', 'ops', 'Error: timeout after 5000 ms'],
      ['a-2', 'alpha', 'ops', 'Error: timeout after 7000 ms'],
    ]);
    expect(await store.outbox.retry()).toEqual(['b-1']);
    expect(await store.outbox.stats()).toMatchObject({ pending: 2, failed: 0 });
    const { rows } = await admin.query(
      `SELECT id FROM "${schema}".outbox WHERE status = 'pending' ORDER BY id`,
    );
    expect(rows.map((r) => r.id)).toEqual(['b-1', 'live']);

    // A re-write of a discarded row's message is the idempotent case: no second row.
    await store.transaction((tx) => publishInTransaction(store, tx, 'alpha', { id: 'a-1' }, { id: 'a-1' }));
    expect((await store.outbox.discarded()).length).toBe(2);
    expect((await store.outbox.stats()).pending).toBe(2);
  });
});
