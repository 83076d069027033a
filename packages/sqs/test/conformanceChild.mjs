// Child-process factory for the crash scenarios (5, 6) of the conformance suite: plain
// JavaScript, run on bare Node. Rebuilds the parent's store from JSON; the broker config
// (endpoint, credentials, queue URL) arrives as JSON too, so the child reaches the same
// in-process fauxqs of the parent over HTTP.
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import * as sqs from '@oncely/sqs';

/** @type {import('@oncely/testkit').ChildModuleFactory} */
export default async function createChildResources({ storeConfig }) {
  const { connectionString, schema } = /** @type {{ connectionString: string; schema: string }} */ (
    storeConfig
  );
  const store = new PostgresStore({ connectionString, schema, logger: silentLogger });
  return { store, adapterModule: sqs };
}
