/**
 * The outbox stats query (the relay's gauges run it at every metric collection, under a
 * 5 s statement timeout) must not read the whole table: sent rows pile up until pruned,
 * and a sequential scan of them made the timeout fire at every collection on a big table,
 * so the gauges had no point at all. Its counts come from the partial indexes of pending
 * and failed rows (0009_outbox_stats_indexes).
 */
import { describe, expect, it } from 'vitest';
import { PostgresStore } from '../src/index.js';
import { buildOutboxQueries } from '../src/outbox/outboxQueries.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const SENT_ROWS = 200_000;
const { schemas, stores } = cleanupAfterFile();

type PlanNode = Record<string, unknown> & { Plans?: PlanNode[] };

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

describe.skipIf(!hasPostgres)('outbox stats query', () => {
  it('reads only pending and failed rows through their indexes, not 200,000 sent rows', async () => {
    const schema = uniqueSchema('outbox_stats');
    schemas.push(schema);
    const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
    stores.push(store);
    await store.migrate();
    const table = `"${schema}".outbox`;
    await admin.query(
      `INSERT INTO ${table} (id, destination, body, status, sent_at, created_at)
       SELECT 's-' || g, 'q', convert_to('{}', 'UTF8'), 'sent', now(), now() - interval '1 hour'
       FROM generate_series(1, $1) AS g`,
      [SENT_ROWS],
    );
    await admin.query(
      `INSERT INTO ${table} (id, destination, body, status, created_at)
       SELECT 'p-' || g, 'q', convert_to('{}', 'UTF8'), 'pending', now() - g * interval '1 second'
       FROM generate_series(1, 5) AS g`,
    );
    await admin.query(
      `INSERT INTO ${table} (id, destination, body, status, attempts, last_error)
       SELECT 'f-' || g, 'q', convert_to('{}', 'UTF8'), 'failed', 10, 'gone' FROM generate_series(1, 3) AS g`,
    );
    await admin.query(`ANALYZE ${table}`);

    const stats = buildOutboxQueries(`"${schema}"`).stats;
    const { rows } = await admin.query(`EXPLAIN (FORMAT JSON) ${stats}`);
    const plan = rows[0]['QUERY PLAN'][0].Plan as PlanNode;
    const scans = nodes(plan).filter((node) => node['Relation Name'] === 'outbox');
    expect(scans.length, 'scans of the outbox in the plan').toBeGreaterThan(0);
    expect(
      scans.map((node) => node['Node Type']),
      'no sequential scan of the outbox',
    ).not.toContain('Seq Scan');

    // And the answer is still right.
    expect(await store.outbox.stats()).toMatchObject({ pending: 5, failed: 3 });
    const { lagMs } = await store.outbox.stats();
    expect(lagMs).toBeGreaterThanOrEqual(5_000);
    expect(lagMs).toBeLessThan(60_000);
  }, 120_000);
});
