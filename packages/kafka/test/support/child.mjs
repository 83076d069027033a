// Child-process side of the crash scenarios (conformance 5 and 6) and of the rebalance
// test: rebuilds the parent's PostgreSQL store from JSON. Plain JavaScript: the child
// runs on bare Node.
import { PostgresStore } from '@oncely/postgres';

/** @param {{ brokerConfig: unknown, storeConfig: { connectionString: string, schema: string } }} input */
export default async function childResources({ storeConfig }) {
  return {
    store: new PostgresStore({ connectionString: storeConfig.connectionString, schema: storeConfig.schema }),
  };
}
