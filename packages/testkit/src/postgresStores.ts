import type { IdempotencyStore, SqlClient } from '@oncely/core';
import type { AdapterHarness, StoreHandle } from './harness.js';

/** A store the harness can migrate (the PostgreSQL store; testkit does not import it). */
export type MigratableStore = IdempotencyStore<SqlClient> & { migrate(): Promise<unknown> };

/** How the testkit builds PostgreSQL stores for a conformance harness (one schema, stores through a proxy). */
export interface PostgresStoresOptions {
  /** The real server, e.g. `postgres://postgres@127.0.0.1:5432/test`. */
  connectionString: string;
  /** One schema per harness: every store it makes uses it. */
  schema: string;
  /** Builds a store at a connection string (direct, or through the outage proxy). */
  createStore(connectionString: string, schema: string): MigratableStore;
}

/**
 * The store half of an adapter harness on the real PostgreSQL: `createStore` (migrated,
 * with the `childConfig` crash scenarios pass to child processes), `createStoreVia`
 * (the same schema through the suite's TCP proxy, for the outage scenario) and
 * `databaseAddress`. The schema is dropped when the scenarios passed and kept as
 * evidence when one failed.
 *
 * @example
 * ```ts
 * const harness: AdapterHarness = {
 *   brokerType: 'rabbitmq',
 *   ...postgresStores({ connectionString, schema, createStore: (cs, schema) => new PostgresStore({ connectionString: cs, schema }) }),
 *   setup,
 * };
 * ```
 */
export function postgresStores(
  options: PostgresStoresOptions,
): Required<Pick<AdapterHarness, 'createStore' | 'createStoreVia' | 'databaseAddress'>> {
  const { connectionString, schema } = options;
  const database = new URL(connectionString);
  return {
    databaseAddress: { host: database.hostname, port: Number(database.port || 5432) },
    async createStore(): Promise<StoreHandle> {
      const store = options.createStore(connectionString, schema);
      await store.migrate();
      return {
        store,
        childConfig: { connectionString, schema },
        async cleanup(outcome) {
          if (outcome?.passed !== false) {
            await store.transaction((tx) => tx.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
          } else {
            console.warn(`[conformance] a scenario failed: keeping schema ${schema} as evidence`);
          }
          await store.close();
        },
      };
    },
    async createStoreVia(port: number): Promise<StoreHandle> {
      const via = new URL(connectionString);
      via.hostname = '127.0.0.1';
      via.port = String(port);
      const store = options.createStore(via.href, schema);
      // The schema belongs to createStore's handle: this one only closes its connections.
      return { store, cleanup: () => store.close() };
    },
  };
}
