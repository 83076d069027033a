// Child-process side of the conformance harness (crossProcess scenarios 5 and 6): plain
// JavaScript, because the child runs on bare Node. It rebuilds the parent's store (same
// database and schema) from JSON; the adapter is loaded by broker.type as usual.
// A childConfig with `url` is the MySQL store's (testkit's dialectStores), one with
// `connectionString` PostgreSQL's (postgresStores).
import { MySqlStore } from '@oncely/mysql';
import { PostgresStore } from '@oncely/postgres';

/** @type {import('@oncely/testkit').ChildModuleFactory} */
export default function createChildResources({ storeConfig }) {
  const { connectionString, url, schema } =
    /** @type {{ connectionString?: string, url?: string, schema: string }} */ (storeConfig);
  if (url !== undefined) return { store: new MySqlStore({ url, schema }) };
  return { store: new PostgresStore({ connectionString: /** @type {string} */ (connectionString), schema }) };
}
