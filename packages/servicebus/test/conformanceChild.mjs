// Child-process factory for the crash scenarios (5, 6) of the conformance suite: plain
// JavaScript, run on bare Node. Rebuilds the parent's store from JSON; the broker config
// (the emulator's connection string, the queue) arrives as JSON too, so the child reaches
// the parent's in-process emulator over TCP.
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import * as servicebus from '@oncely/servicebus';

/** @type {import('@oncely/testkit').ChildModuleFactory} */
export default async function createChildResources({ storeConfig }) {
  const { connectionString, schema } = /** @type {{ connectionString: string; schema: string }} */ (
    storeConfig
  );
  const store = new PostgresStore({ connectionString, schema, logger: silentLogger });
  return { store, adapterModule: servicebus };
}
