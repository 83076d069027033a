/**
 * Proof that the conformance suite goes red: the memory run with one deliberate defect
 * planted in the store, the adapter or the harness. Skipped unless asked for:
 *
 *   ONCELY_DEFECT=no-dedup npx vitest run test/conformance/defects.test.ts
 *
 * Every scenario listed in `red` for that defect must FAIL (the others may pass). The
 * results of the last check are in packages/testkit/README.md.
 */
import type {
  AdapterModule,
  AdapterRuntime,
  BrokerAdapter,
  BrokerConfig,
  Delivery,
  IdempotencyStore,
  SqlClient,
} from '@oncely/core';
import type { MemoryBroker } from '@oncely/memory';
import { type AdapterHarness, runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { memoryFeatures, memoryHarness } from './memoryHarness.js';
import { pgQueueFeatures, pgQueueHarness } from './pgQueueHarness.js';

interface Defect {
  /** The scenarios that must go red. */
  red: number[];
  store?: (store: IdempotencyStore<SqlClient>) => IdempotencyStore<SqlClient>;
  adapter?: (adapter: BrokerAdapter, brokerConfig: BrokerConfig) => BrokerAdapter;
  harness?: (harness: AdapterHarness) => AdapterHarness;
}

/** Delegates every store method, so a defect overrides only what it breaks. */
function storeWith(
  store: IdempotencyStore<SqlClient>,
  overrides: Partial<IdempotencyStore<SqlClient>>,
): IdempotencyStore<SqlClient> {
  return {
    transaction: (work) => store.transaction(work),
    claim: (tx, consumer, ids) => store.claim(tx, consumer, ids),
    savepoint: (tx, work) => store.savepoint(tx, work),
    recordAttempt: (key) => store.recordAttempt(key),
    forgetAttempt: (key) => store.forgetAttempt(key),
    acquireLease: (key, ms) => store.acquireLease(key, ms),
    renewLease: (key, owner, ms) => store.renewLease(key, owner, ms),
    completeLease: (key, owner, result) => store.completeLease(key, owner, result),
    releaseLease: (key, owner) => store.releaseLease(key, owner),
    classifyError: (error) => store.classifyError(error),
    ping: () => store.ping(),
    close: () => store.close(),
    ...overrides,
  };
}

/** Wraps every delivery the adapter dispatches. */
function deliveriesWith(
  adapter: BrokerAdapter,
  change: (delivery: Delivery) => Delivery | undefined,
): BrokerAdapter {
  return {
    type: adapter.type,
    lease: adapter.lease,
    defaultIdStrategy: adapter.defaultIdStrategy,
    start: (runtime) =>
      adapter.start(
        Object.create(runtime, {
          dispatch: {
            value: async (delivery: Delivery) => {
              const changed = change(delivery);
              if (changed) await runtime.dispatch(changed);
            },
          },
        }) as AdapterRuntime,
      ),
    pause: adapter.pause?.bind(adapter),
    resume: adapter.resume?.bind(adapter),
    stop: () => adapter.stop(),
    close: () => adapter.close(),
  };
}

let counter = 0;
const DEFECTS: Record<string, Defect> = {
  // Dedup keyed on the broker's per-copy IDs: producer duplicates become new messages.
  'broker-id': { red: [2, 9], harness: (h) => ({ ...h, idStrategy: 'broker' }) },
  // No dedup at all: every claim succeeds.
  'no-dedup': {
    red: [2, 3, 8, 9],
    store: (store) =>
      storeWith(store, {
        claim: async (tx, consumer, ids) => {
          await store.claim(
            tx,
            consumer,
            ids.map((id) => `${id}#${counter++}`),
          );
          return new Set(ids);
        },
      }),
  },
  // The marker committed first, in its own transaction (the forbidden "mark before work").
  'marker-first': {
    red: [4, 10, 11, 15],
    store: (store) =>
      storeWith(store, {
        claim: (_tx, consumer, ids) => store.transaction((own) => store.claim(own, consumer, ids)),
      }),
  },
  // A dedup check outside the transaction as the gate: racing copies both pass it.
  'check-outside-tx': {
    red: [9],
    store: (store) =>
      storeWith(store, {
        claim: async (tx, consumer, ids) => {
          const schema = (store as { schema?: string }).schema;
          const fresh = new Set<string>();
          for (const id of ids) {
            // A plain read on its own connection: it does not wait for a racing transaction.
            const seen = await store.transaction((probe) =>
              probe.query(
                `SELECT 1 FROM "${schema}".processed_messages WHERE consumer = $1 AND message_id = $2`,
                [consumer, id],
              ),
            );
            if (seen.rows.length === 0) fresh.add(id);
          }
          // The marker is still written, but its outcome is ignored: the read above was the gate.
          await store.claim(tx, consumer, ids);
          return fresh;
        },
      }),
  },
  // Store outages treated as handler failures (fail open into retries and dead letters).
  'outage-as-failure': {
    red: [14],
    store: (store) => storeWith(store, { classifyError: () => 'other' }),
  },
  // Every 40th delivery is acked without being handled: a lost message.
  'drop-messages': {
    red: [1],
    adapter: (adapter) => {
      let n = 0;
      return deliveriesWith(adapter, (delivery) => {
        if (++n % 40 !== 0) return delivery;
        void delivery.ack();
        return undefined;
      });
    },
  },
  // The adapter ignores the free slots and fetches 20 at a time: unbounded concurrency.
  'unbounded-concurrency': {
    red: [1],
    adapter: (adapter) => ({
      ...deliveriesWith(adapter, (d) => d),
      start: (runtime) =>
        adapter.start(
          Object.create(runtime, {
            whenReady: { value: async () => ((await runtime.whenReady()) > 0 ? 20 : 0) },
          }) as AdapterRuntime,
        ),
    }),
  },
  // Deliveries without extendLease: no renewal.
  'no-renewal': {
    red: [7],
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => {
        const { extendLease: _dropped, ...rest } = delivery;
        return Object.assign(Object.create(Object.getPrototypeOf(delivery)), rest, {
          envelope: delivery.envelope,
          leaseExpiresAt: delivery.leaseExpiresAt,
        }) as Delivery;
      }),
  },
  // Retries ignore the backoff: hot redelivery loop.
  'hot-retry': {
    red: [11],
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => ({ ...delivery, retryLater: () => delivery.retryLater(0) })),
  },
  // Dead-lettering acks instead: poison messages vanish.
  'silent-dead-letter': {
    red: [10],
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => ({ ...delivery, deadLetter: () => delivery.ack() })),
  },
  // Acks of redeliveries never reach the broker: a redelivered duplicate stays unsettled.
  'unsettled-redelivery': {
    red: [3],
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) =>
        (delivery.envelope.deliveryCount ?? 1) > 1 ? { ...delivery, ack: async () => {} } : delivery,
      ),
  },
  // On stop the adapter takes 5 more messages and strands them until their lease lapses.
  'strand-on-stop': {
    red: [12],
    adapter: (adapter, config) => ({
      ...deliveriesWith(adapter, (d) => d),
      start: (runtime) => adapter.start(runtime),
      stop: async () => {
        await adapter.stop();
        await (config.broker as MemoryBroker).receive(config.queue as string, { max: 5 });
      },
    }),
  },
  // On stop the adapter gives back the deliveries still in flight: their handlers' work is redone.
  'drop-in-flight-on-stop': {
    red: [12],
    adapter: (adapter, config) => {
      const inFlight = new Set<string>();
      return {
        ...deliveriesWith(adapter, (delivery) => {
          const receipt = (delivery.envelope.raw as { receipt: string }).receipt;
          inFlight.add(receipt);
          const done = () => inFlight.delete(receipt);
          return {
            ...delivery,
            ack: () => delivery.ack().finally(done),
            retryLater: (ms) => delivery.retryLater(ms).finally(done),
            release: () => delivery.release().finally(done),
          };
        }),
        stop: async () => {
          await adapter.stop();
          for (const receipt of inFlight)
            await (config.broker as MemoryBroker).release(receipt).catch(() => {});
        },
      };
    },
  },
  // An adapter that fetches on its own schedule, ignoring whenReady() during a store outage.
  'fetch-during-outage': {
    red: [14],
    adapter: (adapter) => {
      let inFlight = 0;
      return {
        ...deliveriesWith(adapter, (d) => d),
        start: (runtime) =>
          adapter.start(
            Object.create(runtime, {
              whenReady: {
                value: async () => {
                  while (inFlight >= runtime.concurrency && !runtime.stopping.aborted) {
                    await new Promise((resolve) => setTimeout(resolve, 10));
                  }
                  return runtime.stopping.aborted ? 0 : runtime.concurrency - inFlight;
                },
              },
              dispatch: {
                value: async (delivery: Delivery) => {
                  inFlight++;
                  try {
                    await runtime.dispatch(delivery);
                  } finally {
                    inFlight--;
                  }
                },
              },
            }) as AdapterRuntime,
          ),
      };
    },
  },
  // Ordered destinations provisioned without ordering.
  'no-fifo': {
    red: [15],
    harness: (h) => ({ ...h, setup: (test) => h.setup({ ...test, ordered: false }) }),
  },
};

/**
 * Defects planted in the crash-test child (fixtures/pgQueueDefectiveChild.mjs reads
 * ONCELY_DEFECT from the environment it inherits), run on the PostgreSQL-table queue.
 */
const CHILD_DEFECTS: Record<string, number[]> = {
  // The ack leaves before the commit: the killed consumer's message is gone.
  'cp-ack-before-commit': [5],
  // The marker is not kept: the redelivery is applied a second time.
  'cp-lost-marker': [5],
  // The marker commits first, on its own: the work killed before its commit is never redone.
  'cp-marker-first': [6],
};

const name = process.env.ONCELY_DEFECT;
const defect = name ? DEFECTS[name] : undefined;
const childDefect = name ? CHILD_DEFECTS[name] : undefined;
if (name && !defect && !childDefect) {
  const known = [...Object.keys(DEFECTS), ...Object.keys(CHILD_DEFECTS)].join(', ');
  throw new Error(`unknown ONCELY_DEFECT '${name}'; known: ${known}`);
}

function defectiveHarness(planted: Defect): AdapterHarness {
  let harness = memoryHarness();
  if (planted.harness) harness = planted.harness(harness);
  const { store: breakStore, adapter: breakAdapter } = planted;
  return {
    ...harness,
    createStore: breakStore
      ? async () => {
          const handle = await harness.createStore();
          return { ...handle, store: breakStore(handle.store) };
        }
      : harness.createStore,
    createStoreVia:
      breakStore && harness.createStoreVia
        ? async (port) => {
            const handle = await harness.createStoreVia!(port);
            return { ...handle, store: breakStore(handle.store) };
          }
        : harness.createStoreVia,
    loadAdapter: breakAdapter
      ? async (): Promise<AdapterModule> => {
          const { createAdapter } = await import('@oncely/memory');
          return { createAdapter: (config, options) => breakAdapter(createAdapter(config, options), config) };
        }
      : undefined,
  };
}

describe.skipIf(!defect)(`planted defect: ${name ?? 'none'}`, () => {
  if (!defect) return;
  runAdapterConformance({
    name: `memory broker with defect '${name}' (scenarios ${defect.red.join(', ')} must fail)`,
    features: memoryFeatures,
    createHarness: () => defectiveHarness(defect),
    only: defect.red,
  });
});

describe.skipIf(!childDefect)(`planted child defect: ${name ?? 'none'}`, () => {
  if (!childDefect) return;
  runAdapterConformance({
    name: `PostgreSQL-table queue with child defect '${name}' (scenarios ${childDefect.join(', ')} must fail)`,
    features: pgQueueFeatures,
    createHarness: () =>
      pgQueueHarness(new URL('./fixtures/pgQueueDefectiveChild.mjs', import.meta.url).href),
    only: childDefect,
  });
});
