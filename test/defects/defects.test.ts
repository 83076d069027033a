/**
 * Proof that the conformance suite goes red, for the reason it names: every defect below
 * is planted (in the store, the adapter, the harness or the crash-test child) and run
 * against the scenarios that exist to catch it, through `runAdapterConformance`'s
 * `mustFail`. A listed scenario passes this project only when it FAILS with a message
 * containing the text given for it; a scenario that passes against its defect, or fails
 * for another reason, fails the run.
 *
 * The memory broker runs the in-process defects; the PostgreSQL-table queue
 * (../conformance/fixtures/pgQueue.mjs, a broker that outlives a killed process) runs
 * the cross-process ones and the server-side disconnect. The defect-free runs of the same
 * scenarios are ../conformance/memory.test.ts and crossProcess.test.ts.
 *
 * The table in packages/testkit/README.md is this run's output: the file's last hook
 * renders it from what each scenario actually failed with and fails when the README
 * differs, or when a planted scenario did not report at all (a full run must run every
 * one). To rewrite it: ONCELY_WRITE_DEFECTS_TABLE=1 npx vitest run --project defects
 * One defect by hand: ONCELY_DEFECT=no-dedup npx vitest run --project defects (the only
 * partial run the table check accepts; a run filtered with -t fails it).
 *
 * Every run must show each defect's named symptom, on a busy machine too: a target
 * scenario that cannot run for its broker fails (runAdapterConformance), and where a
 * symptom is a wait that never ends, only that wait is shortened (symptomTimeScale).
 */
import { readFile, writeFile } from 'node:fs/promises';
import {
  type AdapterModule,
  type AdapterRuntime,
  type BrokerAdapter,
  type BrokerConfig,
  type Delivery,
  type IdempotencyStore,
  isOncelyError,
  type SqlClient,
} from '@oncely/core';
import type { MemoryBroker } from '@oncely/memory';
import {
  type AdapterHarness,
  type MustFailOutcome,
  requireService,
  runAdapterConformance,
  type StoreHandle,
} from '@oncely/testkit';
import { afterAll, describe } from 'vitest';
import { everyDeliveryFirst } from '../conformance/fixtures/pgQueueDefectiveChild.mjs';
import { memoryFeatures, memoryHarness, probePostgres } from '../conformance/memoryHarness.js';
import { pgQueueFeatures, pgQueueHarness } from '../conformance/pgQueueHarness.js';

interface Defect {
  name: string;
  /** The bug, in a few words (the README table's second column). */
  what: string;
  /**
   * Scenario → text its failure message must contain (the symptom it names); a list when
   * the defect shows one of several symptoms, by a race it causes itself.
   */
  red: Record<number, string | readonly string[]>;
  /** memory: the in-process memory broker; pg-queue: the PostgreSQL-table queue (child processes, disconnects). */
  broker: 'memory' | 'pg-queue';
  /**
   * Where the symptom IS a timeout (a message never arrives): that wait's deadline × this,
   * so the run need not sit it out in full. Only that wait: every other deadline of the
   * scenario keeps its length (runAdapterConformance's symptomTimeScale). @default 1
   */
  symptomTimeScale?: number;
  store?: (store: IdempotencyStore<SqlClient>) => IdempotencyStore<SqlClient>;
  adapter?: (adapter: BrokerAdapter, brokerConfig: BrokerConfig) => BrokerAdapter;
  harness?: (harness: AdapterHarness) => AdapterHarness;
  /** pg-queue only: the crash-test child plants the defect of this name too. */
  child?: boolean;
  /**
   * memory only: a store (a connection pool) of its own instead of the one the memory
   * defects share, where the symptom depends on how many transactions can run at once.
   */
  ownStore?: boolean;
}

/** The store with `overrides`; every other method (and `this`) is the real store's. */
function storeWith(
  store: IdempotencyStore<SqlClient>,
  overrides: Partial<IdempotencyStore<SqlClient>>,
): IdempotencyStore<SqlClient> {
  return Object.assign(Object.create(store) as IdempotencyStore<SqlClient>, overrides);
}

/** Wraps every delivery the adapter dispatches (`undefined` = the delivery is swallowed). */
function deliveriesWith(
  adapter: BrokerAdapter,
  change: (delivery: Delivery) => Delivery | undefined,
): BrokerAdapter {
  return runtimeWith(adapter, (runtime) => ({
    dispatch: {
      value: async (delivery: Delivery) => {
        const changed = change(delivery);
        if (changed) await runtime.dispatch(changed);
      },
    },
  }));
}

/** The adapter, started with a runtime whose properties `overrides` replaces. */
function runtimeWith(
  adapter: BrokerAdapter,
  overrides: (runtime: AdapterRuntime) => PropertyDescriptorMap,
): BrokerAdapter {
  return {
    type: adapter.type,
    lease: adapter.lease,
    defaultIdStrategy: adapter.defaultIdStrategy,
    start: (runtime) => adapter.start(Object.create(runtime, overrides(runtime)) as AdapterRuntime),
    pause: adapter.pause?.bind(adapter),
    resume: adapter.resume?.bind(adapter),
    stop: () => adapter.stop(),
    close: () => adapter.close(),
  };
}

let counter = 0;
const DEFECTS: Defect[] = [
  {
    name: 'broker-id',
    what: "ID strategy `'broker'`: each copy gets its own ID, no effect is recorded under the published IDs",
    broker: 'memory',
    // Both symptoms are waits that never end: the suite's IDs never show up.
    symptomTimeScale: 0.2,
    red: {
      2: 'an effect for each of 200 messages',
      9: 'both deliveries of the raced ID concluded',
    },
    harness: (h) => ({ ...h, idStrategy: 'broker' }),
  },
  {
    name: 'no-dedup',
    what: 'claims never conflict (no dedup at all)',
    broker: 'memory',
    // Scenario 3 waits for a duplicate event that never comes.
    symptomTimeScale: 0.3,
    red: {
      2: 'every ID must have exactly one effect row',
      3: 'to be skipped as a duplicate',
      8: 'effect rows: expected 2 to be 1',
      9: 'effect rows of the raced ID: expected 2 to be 1',
    },
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
  {
    name: 'marker-first',
    what: 'the marker commits first, in its own transaction',
    broker: 'memory',
    // 10, 11 and 15 wait for a retry that is skipped as a duplicate.
    symptomTimeScale: 0.3,
    red: {
      4: 'processed marker after the failed attempt: expected true to be false',
      10: '3 dead letters',
      11: 'retry-delay processed by its third attempt',
      15: 'an effect for each of 24 messages: 1 still missing (key-b-3',
    },
    store: (store) =>
      storeWith(store, {
        claim: (_tx, consumer, ids) => store.transaction((own) => store.claim(own, consumer, ids)),
      }),
  },
  {
    name: 'check-outside-tx',
    what: 'a plain read outside the transaction is the dedup gate',
    broker: 'memory',
    red: { 9: 'effect rows of the raced ID: expected 2 to be 1' },
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
  {
    name: 'silent-rollback',
    what: 'a COMMIT answered ROLLBACK passes as committed (the ack follows a silent rollback)',
    broker: 'memory',
    red: { 4: 'failed runs of swallows-once' },
    store: (store) =>
      storeWith(store, {
        transaction: async (work) => {
          let result: Awaited<ReturnType<typeof work>> | undefined;
          let ran = false;
          try {
            return await store.transaction(async (tx) => {
              result = await work(tx);
              ran = true;
              return result;
            });
          } catch (error) {
            // "The work resolved, so it committed": what a store that never reads the
            // COMMIT's answer believes.
            if (ran && isOncelyError(error, 'TRANSACTION_ABORTED')) return result as never;
            throw error;
          }
        },
      }),
  },
  {
    name: 'outage-as-failure',
    what: 'classifyError never says `unavailable` (outages become failures)',
    broker: 'memory',
    // The outage is never declared: the symptom is the wait for it.
    symptomTimeScale: 0.3,
    red: { 14: 'the consumer to declare the store unavailable' },
    store: (store) => storeWith(store, { classifyError: () => 'other' }),
  },
  {
    name: 'no-forget-attempt',
    what: 'forgetAttempt does nothing: releases count as attempts',
    // The memory broker's release does not raise the delivery count (nothing is counted
    // up front to take back); the table queue's does, like RabbitMQ's and SQS's.
    broker: 'pg-queue',
    red: { 16: 'runs of released-then-failing after its releases: expected' },
    store: (store) => storeWith(store, { forgetAttempt: async () => {} }),
  },
  {
    name: 'every-delivery-redelivered',
    what: 'the adapter flags every delivery as redelivered: the happy path writes an attempt counter',
    broker: 'memory',
    // Counting every run up front also counts the runs a release gives back; a release
    // takes its count back before the message goes back, so the only symptom is the
    // happy path's counter row.
    red: { 16: 'attempt counter of a message processed on its first delivery' },
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => ({
        ...delivery,
        envelope: { ...delivery.envelope, redelivered: true },
      })),
  },
  {
    name: 'drop-messages',
    what: 'every 40th delivery is acked unhandled',
    broker: 'memory',
    // The lost messages never arrive: the symptom is the wait for them. Long enough for
    // every other message to be in on a busy machine: the symptom names the count (5).
    symptomTimeScale: 0.5,
    red: { 1: 'an effect for each of 200 messages: 5 still missing' },
    adapter: (adapter) => {
      let n = 0;
      return deliveriesWith(adapter, (delivery) => {
        if (++n % 40 !== 0) return delivery;
        void delivery.ack();
        return undefined;
      });
    },
  },
  {
    name: 'race-per-message',
    what: "the adapter races each dispatch against a promise that lives as long as the adapter (the Kafka adapter's close() wait before the fix)",
    broker: 'memory',
    red: { 18: 'live Promise objects gained over 2000 messages' },
    adapter: (adapter) => {
      const closed = new Promise<void>(() => {});
      return runtimeWith(adapter, (runtime) => ({
        dispatch: {
          value: async (delivery: Delivery) => {
            await Promise.race([runtime.dispatch(delivery), closed]);
          },
        },
      }));
    },
  },
  {
    name: 'unbounded-concurrency',
    what: 'the adapter ignores the free slots and fetches 20 at a time',
    broker: 'memory',
    // The symptom counts handlers in flight at once: with the pool four other suites
    // share, they could be held to 8 or fewer by connections, not by the consumer.
    ownStore: true,
    red: { 1: 'most handlers in flight at once: expected' },
    adapter: (adapter) =>
      runtimeWith(adapter, (runtime) => ({
        whenReady: { value: async () => ((await runtime.whenReady()) > 0 ? 20 : 0) },
      })),
  },
  {
    name: 'unflushed-ack-batch',
    what: 'acks are sent in batches of 16 and the last partial batch is never flushed',
    broker: 'memory',
    symptomTimeScale: 0.5,
    red: { 1: 'backlog 0 (every message settled at the broker)' },
    adapter: (adapter) => {
      let pending: Array<() => Promise<void>> = [];
      return deliveriesWith(adapter, (delivery) => ({
        ...delivery,
        ack: async () => {
          pending.push(() => delivery.ack());
          if (pending.length < 16) return;
          const batch = pending;
          pending = [];
          await Promise.all(batch.map((ack) => ack()));
        },
      }));
    },
  },
  {
    name: 'no-renewal',
    what: 'deliveries without extendLease',
    broker: 'memory',
    red: { 7: 'receipts of the long-running message: expected' },
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => {
        const { extendLease: _dropped, ...rest } = delivery;
        return Object.assign(Object.create(Object.getPrototypeOf(delivery)), rest, {
          envelope: delivery.envelope,
          leaseExpiresAt: delivery.leaseExpiresAt,
        }) as Delivery;
      }),
  },
  {
    name: 'hot-retry',
    what: 'retryLater(0): retries ignore the backoff',
    broker: 'memory',
    red: { 11: 'ms between attempts 1 and 2' },
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => ({ ...delivery, retryLater: () => delivery.retryLater(0) })),
  },
  {
    name: 'silent-dead-letter',
    what: 'deadLetter acks instead',
    broker: 'memory',
    // The dead letters never arrive.
    symptomTimeScale: 0.3,
    red: { 10: '3 dead letters' },
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) => ({ ...delivery, deadLetter: () => delivery.ack() })),
  },
  {
    name: 'unsettled-redelivery',
    what: 'acks of redeliveries never reach the broker',
    broker: 'memory',
    symptomTimeScale: 0.5,
    red: { 3: 'backlog 0 (every message settled at the broker)' },
    adapter: (adapter) =>
      deliveriesWith(adapter, (delivery) =>
        (delivery.envelope.deliveryCount ?? 1) > 1 ? { ...delivery, ack: async () => {} } : delivery,
      ),
  },
  {
    name: 'strand-on-stop',
    what: 'on stop the adapter takes 5 more messages and strands them',
    broker: 'memory',
    red: { 12: 'an effect for each of 10 messages: 5 still missing' },
    adapter: (adapter, config) => ({
      ...runtimeWith(adapter, () => ({})),
      stop: async () => {
        await adapter.stop();
        await (config.broker as MemoryBroker).receive(config.queue as string, { max: 5 });
      },
    }),
  },
  {
    name: 'drop-in-flight-on-stop',
    what: 'on stop the adapter releases the deliveries still in flight',
    broker: 'memory',
    red: { 12: 'confirmed acks of in-flight' },
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
  {
    name: 'close-on-stop',
    what: 'the adapter closes its connection in stop(), before the releases of the deliveries stop() aborted have settled',
    // The table queue's close() ends its pool: a release sent after it fails, as on a
    // broker whose channel is gone.
    broker: 'pg-queue',
    red: { 19: 'messages released by the time stop() resolved' },
    adapter: (adapter) => ({
      ...runtimeWith(adapter, () => ({})),
      stop: async () => {
        await adapter.stop();
        await adapter.close();
      },
      close: async () => {},
    }),
  },
  {
    name: 'fetch-during-outage',
    what: 'the adapter fetches on its own schedule, ignoring whenReady() during an outage',
    broker: 'memory',
    red: { 14: 'receipts while the store was down (fetching must pause)' },
    adapter: (adapter) => {
      let inFlight = 0;
      return runtimeWith(adapter, (runtime) => ({
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
      }));
    },
  },
  {
    name: 'no-fifo',
    what: 'ordered destinations provisioned without ordering',
    broker: 'memory',
    // Without ordering, key-b-4.. may overtake key-b-3's retry, or may not: that depends
    // on how fast the consumer is next to the 100 ms backoff. So the retry of key-b-3 is
    // held until key-b-7, the last of its key, has been acked: they overtake it on every
    // run (an ordered queue never hands key-b-4 out while key-b-3 is in flight, so there
    // the hold would never matter). key-a or key-c may be reordered too, by the race of
    // three handlers, and they are checked first: any key out of order is this defect.
    red: { 15: 'commit order of key-' },
    harness: (h) => ({ ...h, setup: (test) => h.setup({ ...test, ordered: false }) }),
    adapter: (adapter) => {
      let lastOfKeyAcked!: () => void;
      const acked = new Promise<void>((resolve) => {
        lastOfKeyAcked = resolve;
      });
      return deliveriesWith(adapter, (delivery) => {
        const id = delivery.envelope.attributes['message-id'];
        if (id === 'key-b-7') return { ...delivery, ack: () => delivery.ack().finally(lastOfKeyAcked) };
        if (id !== 'key-b-3') return delivery;
        return {
          ...delivery,
          retryLater: async (delayMs, info) => {
            await acked;
            await delivery.retryLater(delayMs, info);
          },
        };
      });
    },
  },
  {
    name: 'cp-ack-before-commit',
    what: 'the child acks on receipt, before its commit',
    broker: 'pg-queue',
    child: true,
    // The acked message never comes back: the successor waits for it in vain.
    symptomTimeScale: 0.3,
    red: { 5: 'the successor to receive crash-after-commit again and conclude it as duplicate' },
  },
  {
    name: 'cp-lost-marker',
    what: 'the child keeps no marker',
    broker: 'pg-queue',
    child: true,
    red: { 5: 'processed marker after SIGKILL after-commit: expected false to be true' },
  },
  {
    name: 'cp-marker-first',
    what: 'the child commits the marker first, on its own',
    broker: 'pg-queue',
    child: true,
    red: { 6: 'processed marker after SIGKILL before-commit: expected true to be false' },
  },
  {
    name: 'cp-crash-uncounted',
    what: 'every delivery looks like a first delivery: runs that crash the process are never counted',
    broker: 'pg-queue',
    child: true,
    // The crash loop is never dead-lettered: the symptom is the wait for its dead letter.
    symptomTimeScale: 0.3,
    red: { 17: 'dead letter of crashes-every-time' },
    harness: (h) => ({
      ...h,
      loadAdapter: async () => everyDeliveryFirst(await h.loadAdapter!()) as AdapterModule,
    }),
  },
  {
    name: 'dead-after-disconnect',
    what: 'a connection error ends the receive loop (no reconnect)',
    broker: 'pg-queue',
    // The messages after the cut never arrive.
    symptomTimeScale: 0.15,
    red: { 13: 'an effect for each of 100 messages' },
    adapter: (adapter) => {
      let gaveUp = false;
      // A cut session is seen wherever it was: idle in the fixture's pool (its 'error'
      // event, pgQueue.mjs), receiving (reportError), or settling or renewing a delivery
      // (the call rejects). Watching all three, the loop gives up whenever the cut lands.
      (adapter as unknown as { pool: { on(event: 'error', listener: () => void): void } }).pool.on(
        'error',
        () => {
          gaveUp = true;
        },
      );
      const watched =
        <A extends unknown[]>(call: (...args: A) => Promise<void>) =>
        async (...args: A): Promise<void> => {
          try {
            await call(...args);
          } catch (error) {
            gaveUp = true;
            throw error;
          }
        };
      return runtimeWith(adapter, (runtime) => ({
        whenReady: { value: async () => (gaveUp ? 0 : runtime.whenReady()) },
        reportError: {
          value: (error: unknown, message: string) => {
            gaveUp = true;
            runtime.reportError(error, message);
          },
        },
        dispatch: {
          value: (delivery: Delivery) =>
            runtime.dispatch({
              ...delivery,
              ack: watched(delivery.ack),
              retryLater: watched(delivery.retryLater),
              deadLetter: watched(delivery.deadLetter),
              release: watched(delivery.release),
              ...(delivery.extendLease ? { extendLease: watched(delivery.extendLease) } : {}),
            }),
        },
      }));
    },
  },
];

const only = process.env.ONCELY_DEFECT;
if (only && !DEFECTS.some((d) => d.name === only)) {
  throw new Error(`unknown ONCELY_DEFECT '${only}'; known: ${DEFECTS.map((d) => d.name).join(', ')}`);
}
const planted = DEFECTS.filter((d) => !only || d.name === only);

const hasPostgres = await requireService('PostgreSQL', probePostgres);

/** Every memory-broker defect shares one migrated store (one pool): they run side by side. */
const memoryBase = memoryHarness({ poolMax: 20 });
let sharedStore: Promise<StoreHandle> | undefined;
const memoryStore = () => {
  sharedStore ??= memoryBase.createStore();
  return sharedStore;
};

function harnessFor(defect: Defect): AdapterHarness {
  let harness: AdapterHarness;
  if (defect.broker === 'memory') {
    harness = {
      ...memoryBase,
      createStore: defect.ownStore
        ? async () => {
            // Same schema, its own pool: closed, never dropped (the shared store drops it).
            const handle = await memoryBase.createStore();
            return { ...handle, cleanup: () => handle.store.close() };
          }
        : async () => ({ ...(await memoryStore()), cleanup: async () => {} }),
      loadAdapter: async () => import('@oncely/memory') as Promise<AdapterModule>,
    };
  } else {
    const child = new URL('../conformance/fixtures/pgQueueDefectiveChild.mjs', import.meta.url);
    child.searchParams.set('defect', defect.name);
    harness = pgQueueHarness(defect.child ? child.href : undefined);
  }
  if (defect.harness) harness = defect.harness(harness);
  const { store: breakStore, adapter: breakAdapter } = defect;
  const base = harness;
  return {
    ...base,
    createStore: breakStore
      ? async () => {
          const handle = await base.createStore();
          return { ...handle, store: breakStore(handle.store) };
        }
      : base.createStore,
    createStoreVia:
      breakStore && base.createStoreVia
        ? async (port) => {
            const handle = await base.createStoreVia!(port);
            return { ...handle, store: breakStore(handle.store) };
          }
        : base.createStoreVia,
    loadAdapter: breakAdapter
      ? async (): Promise<AdapterModule> => {
          const module = await base.loadAdapter!();
          return {
            createAdapter: (config, options) => breakAdapter(module.createAdapter(config, options), config),
          };
        }
      : base.loadAdapter,
  };
}

/** What each planted scenario failed with, keyed `defect/scenario`. */
const outcomes = new Map<string, MustFailOutcome>();

// Under CI=true (what scripts/test.sh sets) a missing PostgreSQL fails the run instead.
describe
  .skipIf(!hasPostgres)
  .concurrent(
    hasPostgres ? 'planted defects' : 'planted defects [skipped: PostgreSQL is not reachable]',
    () => {
      for (const defect of planted) {
        runAdapterConformance({
          name: `defect '${defect.name}': ${defect.what}`,
          features: defect.broker === 'memory' ? memoryFeatures : pgQueueFeatures,
          createHarness: () => harnessFor(defect),
          mustFail: defect.red,
          onMustFail: (outcome) => outcomes.set(`${defect.name}/${outcome.scenario}`, outcome),
          ...(defect.symptomTimeScale === undefined ? {} : { symptomTimeScale: defect.symptomTimeScale }),
        });
      }

      afterAll(async () => {
        await (await sharedStore)?.cleanup({ passed: true });
        await checkReadmeTable();
      });
    },
  );

const README = new URL('../../packages/testkit/README.md', import.meta.url);
const BEGIN = '<!-- defects table: generated by test/defects, do not edit -->';
const END = '<!-- end of defects table -->';

/** The README table, from this run's outcomes: what each planted scenario failed with. */
function renderTable(): string {
  const rows = ['| defect | planted bug | scenario | fails with |', '| --- | --- | --- | --- |'];
  for (const defect of DEFECTS) {
    for (const [n, text] of Object.entries(defect.red)) {
      const outcome = outcomes.get(`${defect.name}/${n}`);
      const result = !outcome
        ? 'NOT RUN'
        : outcome.caught
          ? (typeof text === 'string' ? [text] : text)
              .map((t) => `\`${t.replaceAll('|', '\\|')}\``)
              .join(' or ')
          : `NOT CAUGHT: ${outcome.message === undefined ? 'passed' : `\`${outcome.message}\``}`;
      const where = defect.broker === 'pg-queue' ? ' (PostgreSQL-table queue)' : '';
      rows.push(`| ${defect.name}${where} | ${defect.what.replaceAll('|', '\\|')} | ${n} | ${result} |`);
    }
  }
  return rows.join('\n');
}

/**
 * Fails when the README's table is not this run's, and when a planted scenario did not
 * report: in a full run every one must have run (a scenario that never reported caught
 * nothing). A run of one defect (ONCELY_DEFECT) checks that defect's scenarios only.
 */
async function checkReadmeTable(): Promise<void> {
  const silent = planted.flatMap((d) =>
    Object.keys(d.red)
      .filter((n) => !outcomes.has(`${d.name}/${n}`))
      .map((n) => `${d.name}/${n}`),
  );
  if (silent.length > 0) {
    throw new Error(
      `planted scenarios that did not report (they caught nothing): ${silent.join(', ')}. A run filtered with -t is not a full run: run one defect with ONCELY_DEFECT=<name>`,
    );
  }
  if (only) return;
  const text = await readFile(README, 'utf8');
  const begin = text.indexOf(BEGIN);
  const end = text.indexOf(END);
  if (begin < 0 || end < begin) throw new Error(`${README.pathname} has no '${BEGIN}' … '${END}' block`);
  const table = renderTable();
  const current = text.slice(begin + BEGIN.length, end).trim();
  if (current === table) return;
  if (process.env.ONCELY_WRITE_DEFECTS_TABLE === '1') {
    await writeFile(README, `${text.slice(0, begin + BEGIN.length)}\n\n${table}\n\n${text.slice(end)}`);
    console.warn(`[defects] rewrote the table in ${README.pathname}`);
    return;
  }
  throw new Error(
    `the defects table in packages/testkit/README.md is not this run's; rewrite it with ONCELY_WRITE_DEFECTS_TABLE=1 npx vitest run --project defects\n--- this run ---\n${table}`,
  );
}
