/**
 * The adapter conformance suite with the batch path on: the adapter hands the core a
 * partition's records as one ordered batch (`runtime.dispatchInOrder`, one transaction)
 * instead of one at a time. The suite builds its consumers itself and has no consumer
 * option to pass, so the harness's adapter is given the consumer's `batch.size` the way
 * the core gives it with `batch: { size }`: `runtime.batchSize`, here the scenario's
 * concurrency (at most 8).
 *
 * Not run here, beyond what conformance.test.ts leaves out:
 * - 13 (`serverSideDisconnect`): the proxy's port is conformance.test.ts's, and only one
 *   file may listen on it.
 * - 12 (graceful stop): it waits for two handlers in flight at once, and the handlers of a
 *   batch run one after another; two only overlap when the messages land on two
 *   partitions, which the scenario does not control. batch.test.ts covers stop.
 * The fault injector wraps `runtime.dispatchInOrder` as it wraps `dispatch`, so the
 * scenarios that drop, hold or watch settlements (3, 4, 14) run on the batch path too.
 */
import type { AdapterModule, AdapterRuntime } from '@oncely/core';
import { createAdapter } from '@oncely/kafka';
import { runAdapterConformance } from '@oncely/testkit';
import { describe, inject, it } from 'vitest';
import { kafkaFeatures, kafkaHarness } from './support/harness.js';
import { testBrokers } from './support/kafka.js';

const brokers = testBrokers();
const MAX_BATCH = 8;
/** Every scenario conformance.test.ts runs but 12 and 13 (see above). */
const APPLICABLE = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16, 17, 18, 19];

/** The Kafka adapter module, its adapters started with `runtime.batchSize` set. */
const batchingAdapter: AdapterModule = {
  createAdapter(broker, options) {
    const adapter = createAdapter(broker, options);
    const start = adapter.start.bind(adapter);
    adapter.start = (runtime: AdapterRuntime) =>
      start(
        Object.create(runtime, {
          batchSize: { value: Math.min(MAX_BATCH, runtime.concurrency), enumerable: true },
        }) as AdapterRuntime,
      );
    return adapter;
  },
};

if (brokers) {
  runAdapterConformance({
    name: 'kafka adapter conformance, batch path',
    features: kafkaFeatures(false),
    only: APPLICABLE,
    createHarness: () => ({ ...kafkaHarness({ brokers }), loadAdapter: async () => batchingAdapter }),
  });
} else {
  describe('kafka adapter conformance, batch path', () => {
    it.skip(`needs a Kafka broker: ${inject('kafkaUnavailable')}`, () => {});
  });
}
