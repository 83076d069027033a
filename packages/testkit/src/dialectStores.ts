import type { AdapterHarness, StoreHandle } from './harness.js';
import type { MigratableStore } from './postgresStores.js';
import type { SqlDialect } from './sqlDialect.js';

/** How the testkit builds stores of any SQL database for a conformance harness. */
export interface DialectStoresOptions {
  /** The real server, e.g. `mysql://root@127.0.0.1:3306/test`. */
  url: string;
  /** One schema (MySQL: database) per harness: every store it makes uses it. */
  schema: string;
  /** The store's SQL dialect: the suite's tables, and dropping the schema. */
  sql: SqlDialect;
  /** The server's port when the URL names none. */
  defaultPort: number;
  /** Builds a store at a URL (direct, or through the outage proxy). */
  createStore(url: string, schema: string): MigratableStore;
}

/**
 * The store half of an adapter harness for a store other than PostgreSQL (what
 * {@link postgresStores} is for PostgreSQL): `createStore` (migrated, with
 * `childConfig: { url, schema }` for the crash scenarios' child processes),
 * `createStoreVia` (the same schema through the suite's TCP proxy), `databaseAddress`
 * and the dialect. The schema is dropped when the scenarios passed and kept as evidence
 * when one failed.
 *
 * @example
 * ```ts
 * const harness: AdapterHarness = {
 *   brokerType: 'memory',
 *   ...dialectStores({ url, schema, sql: mysqlDialect, defaultPort: 3306, createStore: (url, schema) => new MySqlStore({ url, schema }) }),
 *   setup,
 * };
 * ```
 */
export function dialectStores(
  options: DialectStoresOptions,
): Required<Pick<AdapterHarness, 'createStore' | 'createStoreVia' | 'databaseAddress' | 'sql'>> {
  const { url, schema, sql } = options;
  const database = new URL(url);
  return {
    sql,
    databaseAddress: { host: database.hostname, port: Number(database.port || options.defaultPort) },
    async createStore(): Promise<StoreHandle> {
      const store = options.createStore(url, schema);
      await store.migrate();
      return {
        store,
        childConfig: { url, schema },
        async cleanup(outcome) {
          if (outcome?.passed !== false) {
            const drop = sql.dropNamespace(sql.quote(schema));
            if (sql.ddl) await sql.ddl(drop);
            else await store.transaction((tx) => tx.query(drop));
          } else {
            console.warn(`[conformance] a scenario failed: keeping schema ${schema} as evidence`);
          }
          await store.close();
        },
      };
    },
    async createStoreVia(port: number): Promise<StoreHandle> {
      const via = new URL(url);
      via.hostname = '127.0.0.1';
      via.port = String(port);
      const store = options.createStore(via.href, schema);
      // The schema belongs to createStore's handle: this one only closes its connections.
      return { store, cleanup: () => store.close() };
    },
  };
}
