/**
 * A stand-in for the core's side of the adapter contract, for adapter-level tests: the
 * test decides when slots are free (`outage`: `whenReady()` waits, as the core's does
 * while the store is down; it also waits while `concurrency` deliveries are in flight)
 * and how each dispatched delivery is settled.
 */
import type { AdapterRuntime, Delivery } from '@oncely/core';
import { silentLogger } from '@oncely/core';

export interface ControlledRuntime extends AdapterRuntime {
  /** While true, `whenReady()` waits (the core holds new work back during a store outage). */
  outage: boolean;
  /** Calls to `whenReady()` so far. */
  readyCalls: number;
  deliveries: Delivery[];
  errors: Array<{ error: unknown; context: string }>;
  /** How each delivery is settled. @default ack */
  settle: (delivery: Delivery) => Promise<void>;
  stop(): void;
}

export function controlledRuntime(concurrency: number): ControlledRuntime {
  const stopping = new AbortController();
  let inFlight = 0;
  const runtime: ControlledRuntime = {
    consumerName: 'adapter-test',
    concurrency,
    mode: 'transactional',
    store: undefined as never,
    log: silentLogger,
    stopping: stopping.signal,
    outage: false,
    readyCalls: 0,
    deliveries: [],
    errors: [],
    settle: (delivery) => delivery.ack(),
    stop: () => stopping.abort(),
    async whenReady() {
      runtime.readyCalls++;
      for (;;) {
        if (stopping.signal.aborted) return 0;
        if (!runtime.outage && inFlight < concurrency) return concurrency - inFlight;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async dispatch(delivery) {
      runtime.deliveries.push(delivery);
      inFlight++;
      try {
        await runtime.settle(delivery);
      } catch (error) {
        runtime.errors.push({ error, context: 'settle' });
      } finally {
        inFlight--;
      }
    },
    reportError(error, context) {
      runtime.errors.push({ error, context });
    },
  };
  return runtime;
}
