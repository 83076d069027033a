// Child-process side of the conformance harness (crossProcess scenarios 5 and 6): plain
// JavaScript, because the child runs on bare Node. It rebuilds the parent's store (same
// database and schema) from JSON; the adapter is loaded by broker.type as usual.
import { PostgresStore } from '@oncely/postgres';

/** @type {import('@oncely/testkit').ChildModuleFactory} */
export default function createChildResources({ storeConfig }) {
  const { connectionString, schema } = /** @type {{ connectionString: string, schema: string }} */ (
    storeConfig
  );
  return { store: new PostgresStore({ connectionString, schema }) };
}
