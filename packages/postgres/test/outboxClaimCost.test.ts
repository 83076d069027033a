/**
 * What a parked key costs the relay's claim (#26): a key whose head waits out a backoff
 * takes no room in a round, but every claim still walks the pending rows in (xid,
 * position) order. It must not look up the key's head again for each row behind a parked
 * head: with 10,000 such rows that was 10,100 index probes, ~30,000 buffers and ~160 ms
 * per round on the shared test machine, for every round of every relay.
 */
import type { OutboxMessage } from '@oncely/core';
import { publishInTransaction } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { buildOutboxQueries } from '../src/outbox/outboxQueries.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const PARKED_ROWS = 10_000;
const { schemas, stores } = cleanupAfterFile();

/** The buffers a plan node and its children touched (EXPLAIN's totals are inclusive). */
function buffers(plan: Record<string, unknown>): number {
  return Number(plan['Shared Hit Blocks'] ?? 0) + Number(plan['Shared Read Blocks'] ?? 0);
}

describe.skipIf(!hasPostgres)('outbox claim with a parked key', () => {
  it('reads past 10,000 rows behind a parked head without a head look-up per row', async () => {
    const schema = uniqueSchema('outbox_claim');
    schemas.push(schema);
    const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
    stores.push(store);
    await store.migrate();
    const table = `"${schema}".outbox`;
    // The parked key P: its head, then 10,000 rows numbered after it as a keyed write
    // numbers them (in one statement: 10,000 publish calls would only slow the test).
    await store.transaction(async (tx) => {
      await publishInTransaction(store, tx, 'q', { head: true }, { id: 'p-head', key: 'P' });
      await tx.query(
        `INSERT INTO ${table} (id, destination, key, body, attributes, key_seq)
         SELECT 'p-' || g, 'q', 'P', convert_to('{}', 'UTF8'), '{}'::jsonb, nextval('"${schema}".outbox_key_seq')
         FROM generate_series(1, $1) AS g`,
        [PARKED_ROWS],
      );
    });
    await store.transaction(async (tx) => {
      for (let i = 0; i < 50; i++)
        await publishInTransaction(store, tx, 'q', { i }, { id: `h-${i}`, key: `H${i % 10}` });
    });
    await admin.query(`ANALYZE ${table}`);
    const sent: OutboxMessage[] = [];
    const relay = createRelay({
      store,
      listen: false,
      batchSize: 100,
      backoff: { initialMs: 3_600_000, maxMs: 3_600_000, jitter: 0 },
      producers: {
        async send(messages) {
          return messages.map((message) => {
            if (message.key === 'P') return { ok: false as const, error: new Error('P is broken') };
            sent.push(message);
            return { ok: true as const };
          });
        },
      },
    });
    // The first round fails P's head: P is parked for an hour.
    expect(await relay.runOnce()).toMatchObject({ failed: 1 });

    const claim = buildOutboxQueries(`"${schema}"`).claim;
    const client = await admin.connect();
    let plan: Record<string, number>;
    try {
      await client.query('BEGIN');
      const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${claim}`, [100]);
      plan = rows[0]['QUERY PLAN'][0].Plan;
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    // Walking 10,000 index entries and their heap rows is a few hundred buffers; a head
    // look-up per row was three buffers a row (30,575 measured before the fix).
    expect(buffers(plan), 'buffers one claim touched').toBeLessThan(PARKED_ROWS / 2);

    // And the round itself: every healthy row goes, none of P's.
    for (let round = 0; round < 5 && sent.length < 50; round++) await relay.runOnce();
    expect(sent.length).toBe(50);
  });

  it('finds the failing keys without reading a healthy backlog (30,000 pending rows, none failing)', async () => {
    const { store, table } = await migratedStore();
    await store.transaction((tx) =>
      tx.query(
        `INSERT INTO ${table} (id, destination, key, body, attributes, key_seq)
         SELECT 'b-' || g, 'q', 'K' || (g % 5000), convert_to('{}', 'UTF8'), '{}'::jsonb, nextval('${table}_key_seq')
         FROM generate_series(1, 30000) AS g`,
      ),
    );
    await admin.query(`ANALYZE ${table}`);
    const plan = await explainClaim(table);
    // The look-up of failing keys ran on every round of every relay: it read every pending
    // keyed row (517 buffers here before its index, 70 times the claim itself).
    const tried = findNode(plan, (node) => node['Subplan Name'] === 'CTE tried');
    expect(tried, 'the failing-keys CTE in the plan').toBeDefined();
    expect(buffers(tried!), 'buffers the failing-keys look-up touched').toBeLessThan(50);
  });

  it('excludes 10,000 failing keys by a hash, not by a comparison with each of them per row', async () => {
    const { store, table } = await migratedStore();
    // 10,000 keys whose head failed and waits an hour, 4 rows behind each, then healthy rows.
    await store.transaction((tx) =>
      tx.query(
        `INSERT INTO ${table} (id, destination, key, body, attributes, key_seq, attempts, next_attempt_at)
         SELECT 'f-' || k || '-' || r, 'q', 'F' || k, convert_to('{}', 'UTF8'), '{}'::jsonb,
           nextval('${table}_key_seq'), CASE WHEN r = 0 THEN 1 ELSE 0 END,
           CASE WHEN r = 0 THEN now() + interval '1 hour' END
         FROM generate_series(1, 10000) AS k, generate_series(0, 4) AS r ORDER BY r, k`,
      ),
    );
    await store.transaction(async (tx) => {
      for (let i = 0; i < 20; i++)
        await publishInTransaction(store, tx, 'q', { i }, { id: `h-${i}`, key: `H${i}` });
    });
    await admin.query(`ANALYZE ${table}`);
    const plan = await explainClaim(table);
    // `key <> ALL (array of the 10,000 keys)` compared each of the 50,000 rows walked with
    // every failing key: 5.0 s per claim measured, 77 ms with the hashed look-up.
    const scan = findNode(plan, (node) => node['Relation Name'] === 'outbox' && node.Alias === 'o');
    expect(String(scan?.Filter), 'the claim scan filter').toContain('hashed SubPlan');
    expect(String(scan?.Filter)).not.toContain('<> ALL');

    const sent: string[] = [];
    const relay = createRelay({
      store,
      listen: false,
      producers: {
        async send(messages) {
          sent.push(...messages.map((message) => message.id));
          return messages.map(() => ({ ok: true as const }));
        },
      },
    });
    await relay.runOnce();
    expect(sent.sort()).toEqual(Array.from({ length: 20 }, (_, i) => `h-${i}`).sort());
  });
});

async function migratedStore(): Promise<{ store: PostgresStore; table: string }> {
  const schema = uniqueSchema('outbox_claim');
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
  stores.push(store);
  await store.migrate();
  return { store, table: `"${schema}".outbox` };
}

interface PlanNode {
  Plans?: PlanNode[];
  [field: string]: unknown;
}

async function explainClaim(table: string): Promise<PlanNode> {
  const claim = buildOutboxQueries(table.slice(0, -'.outbox'.length)).claim;
  const client = await admin.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${claim}`, [100]);
    return rows[0]['QUERY PLAN'][0].Plan;
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

function findNode(plan: PlanNode, match: (node: PlanNode) => boolean): PlanNode | undefined {
  if (match(plan)) return plan;
  for (const child of plan.Plans ?? []) {
    const found = findNode(child, match);
    if (found) return found;
  }
  return undefined;
}
