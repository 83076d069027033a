import { type BatchItem, processBatchOnce, type SqlClient } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

/**
 * processBatchOnce with ordering groups (issue #15): the records of one Kafka partition
 * must take effect in offset order, so when one fails, those after it in its group must
 * not commit ahead of its retry. They come back `released` with their claims undone;
 * the other groups of the batch commit.
 */
const { schemas, stores } = cleanupAfterFile();

async function storeWithEffects() {
  const schema = uniqueSchema('ordered_batch');
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema });
  stores.push(store);
  await store.migrate();
  await admin.query(`CREATE TABLE "${schema}".effects (seq bigserial PRIMARY KEY, message_id text NOT NULL)`);
  const effects = async () =>
    (
      await admin.query<{ message_id: string }>(`SELECT message_id FROM "${schema}".effects ORDER BY seq`)
    ).rows.map((row) => row.message_id);
  return { store, schema, effects };
}

/** One item per ID: `group` is its ordering group, the IDs in `failing` throw. */
function items(
  schema: string,
  entries: Array<[id: string, group: string | undefined]>,
  failing: ReadonlySet<string>,
): BatchItem<void, SqlClient>[] {
  return entries.map(([id, group]) => ({
    messageId: id,
    ...(group === undefined ? {} : { orderingGroup: group }),
    work: async (tx: SqlClient) => {
      await tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [id]);
      if (failing.has(id)) throw new Error(`${id} fails`);
    },
  }));
}

describe.skipIf(!hasPostgres)('processBatchOnce with ordering groups', () => {
  it('releases what follows a failed item in its group; other groups and ungrouped items commit', async () => {
    const { store, schema, effects } = await storeWithEffects();
    const batch = items(
      schema,
      [
        ['p0-1', 'p0'],
        ['p1-1', 'p1'],
        ['p0-2', 'p0'],
        ['p0-3', 'p0'],
        ['free-1', undefined],
        ['p1-2', 'p1'],
        ['p0-4', 'p0'],
      ],
      new Set(['p0-2']),
    );
    const results = await processBatchOnce(store, 'c', batch);
    expect(results.map((r) => r.status)).toEqual([
      'processed',
      'processed',
      'failed',
      'released',
      'processed',
      'processed',
      'released',
    ]);
    expect(await effects()).toEqual(['p0-1', 'p1-1', 'free-1', 'p1-2']);
    // No marker stays behind for the released ones: fetched again after the failed one,
    // they run (a marker would make them duplicates, their effect lost).
    const again = await processBatchOnce(
      store,
      'c',
      items(
        schema,
        [
          ['p0-2', 'p0'],
          ['p0-3', 'p0'],
          ['p0-4', 'p0'],
        ],
        new Set(),
      ),
    );
    expect(again.map((r) => r.status)).toEqual(['processed', 'processed', 'processed']);
    expect(await effects()).toEqual(['p0-1', 'p1-1', 'free-1', 'p1-2', 'p0-2', 'p0-3', 'p0-4']);
  });

  it('releases a duplicate behind a failure too, and a repeat of a released ID shares its outcome', async () => {
    const { store, schema, effects } = await storeWithEffects();
    await processBatchOnce(store, 'c', items(schema, [['old', 'p0']], new Set()));
    const results = await processBatchOnce(
      store,
      'c',
      items(
        schema,
        [
          ['bad', 'p0'],
          ['old', 'p0'],
          ['next', 'p0'],
          ['next', 'p1'],
        ],
        new Set(['bad']),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(['failed', 'released', 'released', 'released']);
    expect(await effects()).toEqual(['old']);
  });

  it('without ordering groups a failure does not hold back the items after it', async () => {
    const { store, schema, effects } = await storeWithEffects();
    const results = await processBatchOnce(
      store,
      'c',
      items(
        schema,
        [
          ['a', undefined],
          ['b', undefined],
          ['c', undefined],
        ],
        new Set(['b']),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(['processed', 'failed', 'processed']);
    expect(await effects()).toEqual(['a', 'c']);
  });

  // A handler run is an attempt: running the failing item again in the savepoint rerun
  // doubled its runs per attempt, and ran again a handler that had been aborted (stop).
  it('runs a failing item once: the savepoint rerun reuses its error instead of running it again', async () => {
    const { store, schema, effects } = await storeWithEffects();
    const runs = new Map<string, number>();
    const batch = items(
      schema,
      [
        ['a', 'g'],
        ['bad', 'g'],
        ['c', 'h'],
      ],
      new Set(['bad']),
    ).map((item) => ({
      ...item,
      work: async (tx: SqlClient) => {
        runs.set(item.messageId, (runs.get(item.messageId) ?? 0) + 1);
        await item.work(tx);
      },
    }));
    const results = await processBatchOnce(store, 'c', batch);
    expect(results.map((r) => r.status)).toEqual(['processed', 'failed', 'processed']);
    expect((results[1] as { error: Error }).error.message).toBe('bad fails');
    expect(runs.get('bad'), 'runs of the failing item').toBe(1);
    expect(await effects()).toEqual(['a', 'c']);
  });
});
