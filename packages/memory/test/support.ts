/**
 * What the consumer tests share: an embedded store with an `effects` table, a broker, and
 * the effects counted per message ID. Each takes the test file's cleanup list, run in
 * reverse by its afterEach.
 */
import { MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';

export type Cleanups = Array<() => Promise<void> | void>;

/** A migrated embedded store with `effects`: no unique key on message_id, only the marker stops a second row. */
export async function storeWithEffects(cleanups: Cleanups): Promise<PostgresStore> {
  const store = PostgresStore.embedded();
  cleanups.push(() => store.close());
  await store.migrate();
  await store.transaction((tx) =>
    tx.query('CREATE TABLE effects (n serial PRIMARY KEY, message_id text NOT NULL)'),
  );
  return store;
}

export function newBroker(cleanups: Cleanups): MemoryBroker {
  const broker = new MemoryBroker();
  cleanups.push(() => broker.close());
  return broker;
}

export async function effectsPerId(store: PostgresStore): Promise<Map<string, number>> {
  const { rows } = await store.transaction((tx) =>
    tx.query<{ message_id: string; n: number }>(
      'SELECT message_id, count(*)::int AS n FROM effects GROUP BY message_id',
    ),
  );
  return new Map(rows.map((row) => [row.message_id, row.n]));
}
