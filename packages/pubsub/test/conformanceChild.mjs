// Child-process factory for the crash scenarios (5, 6) of the conformance suite: plain
// JavaScript, run on bare Node. Rebuilds the parent's store from JSON; the broker config
// (project, emulator address, subscription) arrives as JSON too, so the child reaches the
// parent's in-process emulator over gRPC.
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import * as pubsub from '@oncely/pubsub';

/** @type {import('@oncely/testkit').ChildModuleFactory} */
export default async function createChildResources({ storeConfig }) {
  const { connectionString, schema } = /** @type {{ connectionString: string; schema: string }} */ (
    storeConfig
  );
  const store = new PostgresStore({ connectionString, schema, logger: silentLogger });
  return { store, adapterModule: pubsub };
}
