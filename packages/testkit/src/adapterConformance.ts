import { randomBytes } from 'node:crypto';
import v8 from 'node:v8';
import type { Handler, HandlerContext, IdempotencyStore, Message, MessageKey, SqlClient } from '@oncely/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CrashPoint } from './childProtocol.js';
import { type CrashingChild, startCrashingChild } from './crashingChild.js';
import { HarnessIncompleteError, WaitTimeoutError } from './errors.js';
import type { AdapterFeatures, AdapterHarness, SetupOptions, StoreHandle } from './harness.js';
import {
  BACKLOG_ZERO_WAIT,
  effectsWait,
  harnessDialect,
  loadHarnessAdapter,
  ScenarioRun,
  type SuiteState,
  sleep,
  suiteDdl,
} from './ScenarioRun.js';
import { waitFor } from './spies.js';
import { TcpProxy } from './TcpProxy.js';

/**
 * Options of {@link runAdapterConformance}.
 *
 * @example
 * ```ts
 * const options: AdapterConformanceOptions = { features, createHarness: () => harness, only: [3, 14], timeScale: 2 };
 * ```
 */
export interface AdapterConformanceOptions {
  /** What the broker can do; scenarios needing an absent feature are skipped with its name in the title. */
  features: AdapterFeatures;
  /** Builds the harness, once per run (in `beforeAll`). */
  createHarness: () => AdapterHarness | Promise<AdapterHarness>;
  /** Title of the `describe` block. @default 'adapter conformance' */
  name?: string;
  /**
   * Run only these scenario numbers (1–19), for debugging an adapter. The others are
   * registered as skipped (`[skipped: not in only]`), never dropped. @default all
   */
  only?: readonly number[];
  /**
   * Planted-defect runs: each listed scenario must FAIL with an error whose message
   * matches its symptom: a pattern, or text (one of several texts) the first line of the
   * message must contain. Its test passes when it does, and fails when the scenario
   * passes (the defect went undetected) or fails for another reason. A listed scenario
   * that cannot run here (a feature the adapter lacks, left out by `only`, or no such
   * scenario) fails too: a defect nobody checked must not look caught. Scenarios not
   * listed are registered as skipped. @default none
   */
  mustFail?: Readonly<Record<number, Symptom>>;
  /** Called with each `mustFail` scenario's outcome, for reports. @default none */
  onMustFail?: (outcome: MustFailOutcome) => void;
  /** Multiplies every deadline, for slow emulators. @default 1 */
  timeScale?: number;
  /**
   * Planted-defect runs whose symptom is a wait that never ends (a message that never
   * arrives): multiplies the deadline of that wait only, the one whose label the
   * `mustFail` symptom names (its text starts with the label, or the label contains it),
   * so the run does not sit out the full deadline a slow broker gets. Every other
   * deadline of the scenario keeps its full length: on a busy machine a shortened
   * unrelated wait would fail first, with the wrong message. @default 1
   */
  symptomTimeScale?: number;
}

/**
 * What a `mustFail` scenario must fail with: a pattern its message's first line matches,
 * or text it contains (any one of several).
 *
 * @example
 * ```ts
 * const symptom: Symptom = ['backlog 0', 'still missing'];
 * ```
 */
export type Symptom = RegExp | string | readonly string[];

/**
 * How a `mustFail` scenario ended.
 *
 * @example
 * ```ts
 * const outcome: MustFailOutcome = { scenario: 3, title: '3. ack lost…', caught: true, message: 'backlog 0 …' };
 * ```
 */
export interface MustFailOutcome {
  scenario: number;
  title: string;
  /** True when the scenario failed and its error matched the expected symptom. */
  caught: boolean;
  /** The scenario's error message (first line), or undefined when it passed. */
  message?: string;
}

/** What a scenario body gets. */
interface ScenarioContext {
  run: ScenarioRun;
  features: AdapterFeatures;
  state: SuiteState;
  /**
   * A deadline: `ms` × the suite's `timeScale`. `wait` labels a wait whose timeout can
   * itself be a planted defect's symptom (its message starts with the label); in a
   * planted-defect run naming that symptom, `symptomTimeScale` shortens it too.
   */
  t(ms: number, wait?: string): number;
}

interface Scenario {
  n: number;
  slug: string;
  title: string;
  /** Names of the features (or capabilities) that are missing for this scenario. */
  missing(features: AdapterFeatures): string[];
  setup(features: AdapterFeatures): SetupOptions & { leaseMs: number };
  /** Test timeout before time scaling. */
  timeoutMs: number;
  body(context: ScenarioContext): Promise<void>;
}

/**
 * Registers the adapter conformance suite (shared/CONFORMANCE.md scenarios 1–15, plus 16
 * and 17 on counting attempts, 18 on what a long run retains and 19 on what stop()
 * settles before it resolves) as vitest tests. Every adapter runs it against its real broker or emulator; each scenario
 * builds its consumers with `new Consumer(config, adapter)` around the harness's
 * adapter wrapped in a {@link FaultInjector}, writes every effect as a row of a real
 * PostgreSQL table through `ctx.tx`, and checks by counting rows. A scenario whose
 * feature the adapter declares absent is registered as skipped, with the missing
 * feature's name in its title.
 *
 * @example
 * ```ts
 * import { runAdapterConformance } from '@oncely/testkit';
 *
 * runAdapterConformance({
 *   features: { redeliveryOnRetry: true, delayedRetry: true, leaseExtension: false, nativeDeadLetter: true,
 *     deliveryCount: false, ordering: 'none', competingConsumers: true, serverSideDisconnect: true,
 *     brokerRestart: false, brokerDedup: false, staleAckDetectable: true, crossProcess: true },
 *   createHarness: () => rabbitHarness(),
 * });
 * ```
 */
export function runAdapterConformance(options: AdapterConformanceOptions): void {
  const { features } = options;
  const scale = options.timeScale ?? 1;
  let state: SuiteState | undefined;

  describe(options.name ?? 'adapter conformance', () => {
    beforeAll(async () => {
      const harness = await options.createHarness();
      let storeHandle: StoreHandle | undefined;
      try {
        storeHandle = await harness.createStore();
        const adapterModule = await loadHarnessAdapter(harness);
        const schemaName = `oncely_conformance_${randomBytes(4).toString('hex')}`;
        const sql = harnessDialect(harness);
        const schema = sql.quote(schemaName);
        await suiteDdl(sql, storeHandle.store, sql.createNamespace(schema));
        state = {
          sql,
          features,
          harness,
          storeHandle,
          adapterModule,
          schema,
          schemaName,
          scenarioCount: 0,
          failed: false,
        };
      } catch (error) {
        // Nothing will run: give back what was opened so the process can exit.
        await storeHandle?.cleanup({ passed: false }).catch(() => {});
        await harness.close?.().catch(() => {});
        throw error;
      }
    }, 120_000 * scale);

    afterAll(async () => {
      if (!state) return;
      const { storeHandle, harness, schema, failed, sql } = state;
      if (failed) {
        console.warn(`[oncely conformance] a scenario failed: schema ${schema} is kept for inspection`);
      } else {
        await suiteDdl(sql, storeHandle.store, sql.dropNamespace(schema)).catch(() => {});
      }
      await storeHandle.cleanup({ passed: !failed }).catch(() => {});
      await harness.close?.();
    }, 60_000 * scale);

    for (const n of Object.keys(options.mustFail ?? {}).map(Number)) {
      if (SCENARIOS.some((scenario) => scenario.n === n)) continue;
      it(`${n}. [must fail, but there is no scenario ${n}]`, () => {
        throw new Error(
          `mustFail names scenario ${n}, which does not exist: its defect is checked by nothing`,
        );
      });
    }
    for (const scenario of SCENARIOS) {
      const title = `${scenario.n}. ${scenario.title}`;
      const symptom = options.mustFail?.[scenario.n];
      const matcher = symptom === undefined ? undefined : symptomMatcher(symptom);
      const missing = scenario.missing(features);
      const excluded = options.only !== undefined && !options.only.includes(scenario.n);
      if (matcher && (excluded || missing.length > 0)) {
        // A planted defect whose scenario cannot run would otherwise pass as a skip.
        const why = excluded ? 'it is not in only' : `the adapter lacks ${missing.join(' + ')}`;
        it(`${title} [must fail: ${matcher.title}, but cannot run: ${why}]`, () => {
          throw new Error(
            `scenario ${scenario.n} must fail with ${matcher.title}, but it cannot run here (${why}): the planted defect goes unchecked`,
          );
        });
        continue;
      }
      if (excluded) {
        it.skip(`${title} [skipped: not in only]`, () => {});
        continue;
      }
      if (options.mustFail && !matcher) {
        it.skip(`${title} [skipped: not a planted-defect target]`, () => {});
        continue;
      }
      if (missing.length > 0) {
        it.skip(`${title} [skipped: needs ${missing.join(' + ')}]`, () => {});
        continue;
      }
      const symptomScale = options.symptomTimeScale ?? 1;
      const t = (ms: number, wait?: string) =>
        Math.round(ms * scale * (matcher && wait !== undefined && matcher.names(wait) ? symptomScale : 1));
      it(
        matcher ? `${title} [must fail: ${matcher.title}]` : title,
        async () => {
          if (!state) throw new Error('the conformance suite did not initialise (see the beforeAll error)');
          const suite = state;
          const run = await ScenarioRun.begin(suite, scenario.slug, scenario.setup(features));
          let passed = false;
          let failure: unknown;
          try {
            await scenario.body({ run, features, state: suite, t });
          } catch (error) {
            failure = error;
          }
          // A planted defect caught for the reason it names is this test's success.
          const message = failure === undefined ? undefined : firstLine(failure);
          const caught = matcher !== undefined && message !== undefined && matcher.caught(message);
          passed = symptom ? caught : failure === undefined;
          try {
            if (matcher) options.onMustFail?.({ scenario: scenario.n, title, caught, message });
            if (passed) return;
            suite.failed = true;
            console.error(`[oncely conformance] ${title} failed; evidence:\n${run.evidence()}`);
            if (matcher && failure === undefined) {
              throw new Error(
                `scenario ${scenario.n} passed, but the planted defect must make it fail with ${matcher.title}: the defect went undetected`,
              );
            }
            if (matcher) {
              throw new Error(
                `scenario ${scenario.n} failed, but not with the planted defect's symptom ${matcher.title}: ${message}`,
                { cause: failure },
              );
            }
            throw failure;
          } finally {
            await run.end(passed);
          }
        },
        scenario.timeoutMs * scale,
      );
    }
  });
}

// ---------------------------------------------------------------------------------------
// Helpers shared by the scenarios
// ---------------------------------------------------------------------------------------

/** How a `mustFail` symptom is checked, and which wait it names. */
interface SymptomMatcher {
  /** For titles and messages. */
  title: string;
  /** True when a failure's first line shows the symptom. */
  caught(message: string): boolean;
  /** True when the symptom is the timeout of the wait labelled `wait`. */
  names(wait: string): boolean;
}

function symptomMatcher(symptom: Symptom): SymptomMatcher {
  if (symptom instanceof RegExp) {
    return { title: String(symptom), caught: (m) => symptom.test(m), names: (wait) => symptom.test(wait) };
  }
  const texts: readonly string[] = typeof symptom === 'string' ? [symptom] : symptom;
  return {
    title: texts.map((text) => JSON.stringify(text)).join(' or '),
    caught: (message) => texts.some((text) => message.includes(text)),
    names: (wait) => texts.some((text) => text.startsWith(wait) || wait.includes(text)),
  };
}

/** The first line of an error's message (vitest appends diffs after it). */
function firstLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split('\n', 1)[0] ?? '';
}

function ids(prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
}

function needs(features: AdapterFeatures, ...names: Array<keyof AdapterFeatures>): string[] {
  return names.filter((name) => {
    const value = features[name];
    return name === 'ordering' ? value === 'none' : value !== true;
  });
}

/** A handler that writes one effect row per message, as `label`. */
/** `store`, with every `recordAttempt` call's message ID pushed onto `counted`. */
function countingAttempts(
  store: IdempotencyStore<SqlClient>,
  counted: string[],
): IdempotencyStore<SqlClient> {
  return new Proxy(store, {
    get(target, property) {
      if (property === 'recordAttempt') {
        // Every argument passed on (the run's token too): a spy must not change what it watches.
        return (key: MessageKey, ...rest: [run?: string]) => {
          counted.push(key.messageId);
          return target.recordAttempt(key, ...rest);
        };
      }
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function recordEffect(run: ScenarioRun, label: string): Handler<any> {
  return async (message, ctx) => {
    await run.insertEffect(ctx, message, label);
  };
}

/** Asserts exactly one committed effect per ID and nothing else. */
function expectOneEffectEach(
  counts: Map<string, number>,
  expected: readonly string[],
  what = 'effects per ID',
): void {
  const wrong = expected.filter((id) => counts.get(id) !== 1).map((id) => `${id}=${counts.get(id) ?? 0}`);
  expect(wrong, `${what}: every ID must have exactly one effect row`).toEqual([]);
  const unexpected = [...counts.keys()].filter((id) => !expected.includes(id));
  expect(unexpected, 'effect rows for IDs that were never published').toEqual([]);
}

/** Resolves with `promise`, or rejects with a WaitTimeoutError after `ms`. */
async function within<T>(promise: Promise<T>, ms: number, description: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new WaitTimeoutError(description, ms)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Live objects of the kinds a per-message leak leaves behind, counted after a full GC. */
interface LiveObjects {
  Promise: number;
  AbortSignal: number;
  Timeout: number;
}

function liveObjects(): LiveObjects {
  // Node >= 20.13 / 22; experimental, so looked up rather than typed.
  const queryObjects = (v8 as { queryObjects?: (ctor: unknown, options: { format: 'count' }) => number })
    .queryObjects;
  if (typeof queryObjects !== 'function') {
    throw new Error(`v8.queryObjects is missing in Node ${process.version}: scenario 18 needs Node >= 20.13`);
  }
  const probe = setTimeout(() => {}, 0);
  const Timeout = probe.constructor;
  clearTimeout(probe);
  return {
    Promise: queryObjects(Promise, { format: 'count' }),
    AbortSignal: queryObjects(AbortSignal, { format: 'count' }),
    Timeout: queryObjects(Timeout, { format: 'count' }),
  };
}

const byId = (messageId: string) => (e: { event: { messageId?: string } }) => e.event.messageId === messageId;

// ---------------------------------------------------------------------------------------
// The scenarios (shared/CONFORMANCE.md). Each comment names the defect it must catch
// and how it was checked to go red.
// ---------------------------------------------------------------------------------------

const SCENARIOS: Scenario[] = [
  {
    n: 1,
    slug: 'happy-path',
    title: 'happy path: 200 messages, concurrency 8',
    // Catches lost messages (an ID without a row, backlog > 0) and missing or unbounded
    // concurrency (max handlers in flight < 2 or > 8).
    missing: () => [],
    setup: () => ({ leaseMs: 30_000, partitions: 8 }),
    timeoutMs: 120_000,
    async body({ run, t }) {
      const published = ids('happy', 200);
      let inFlight = 0;
      let maxInFlight = 0;
      await run.startConsumer({
        label: 'a',
        concurrency: 8,
        handler: async (message, ctx) => {
          inFlight++;
          maxInFlight = Math.max(maxInFlight, inFlight);
          try {
            await run.insertEffect(ctx, message, 'a');
            // A little simulated work so concurrent handlers overlap.
            await sleep(10);
          } finally {
            inFlight--;
          }
        },
      });
      await run.publish(published.map((id, n) => ({ id, body: { n } })));
      const counts = await run.waitForEffects(published, t(90_000, effectsWait(published.length)));
      await run.spy.waitForCount('processed', published.length, undefined, t(10_000));
      expectOneEffectEach(counts, published);
      await run.waitForBacklogZero(t(20_000, BACKLOG_ZERO_WAIT));
      expect(maxInFlight, 'most handlers in flight at once').toBeGreaterThanOrEqual(2);
      expect(maxInFlight, 'most handlers in flight at once').toBeLessThanOrEqual(8);
    },
  },
  {
    n: 2,
    slug: 'producer-duplicates',
    title: 'producer duplicates: each ID published 3×',
    // Catches dedup keyed on broker-assigned IDs only: every copy would then be a new
    // message and each ID would have 3 rows.
    missing: () => [],
    setup: () => ({ leaseMs: 30_000, partitions: 4 }),
    timeoutMs: 120_000,
    async body({ run, features, t }) {
      const published = ids('dup', 200);
      const copies = 3;
      await run.startConsumer({ label: 'a', concurrency: 8, handler: recordEffect(run, 'a') });
      const messages = [];
      for (let copy = 0; copy < copies; copy++)
        messages.push(...published.map((id, n) => ({ id, body: { n, copy } })));
      await run.publish(messages);
      const counts = await run.waitForEffects(published, t(90_000, effectsWait(published.length)));
      if (features.brokerDedup) {
        await run.waitForBacklogZero(t(30_000));
      } else {
        await waitFor(() => run.spy.count('processed') + run.spy.count('duplicate') >= messages.length, {
          timeoutMs: t(60_000),
          description: `${messages.length} deliveries concluded as processed or duplicate (${run.spy.summary()})`,
        });
        await run.waitForBacklogZero(t(30_000));
      }
      // Quiescence: every delivery received has concluded.
      await waitFor(
        () => run.spy.count('received') === run.spy.count('processed') + run.spy.count('duplicate'),
        {
          timeoutMs: t(20_000),
          description: `received = processed + duplicate (${run.spy.summary()})`,
        },
      );
      expectOneEffectEach(await run.effectCounts(), published);
      expect(counts.size).toBe(published.length);
      const deliveries = run.spy.count('received');
      expect(run.spy.count('processed'), 'processed events').toBe(published.length);
      expect(run.spy.count('duplicate'), 'duplicate events = deliveries − 200').toBe(
        deliveries - published.length,
      );
      if (!features.brokerDedup)
        expect(deliveries, 'every published copy delivered').toBeGreaterThanOrEqual(messages.length);
    },
  },
  {
    n: 3,
    slug: 'ack-lost',
    title: 'ack lost after commit, then redelivery',
    // Catches no dedup on redelivery (a lost-ack message would get a second row) and a
    // redelivered message left unsettled (no confirmed ack, backlog > 0).
    missing: () => [],
    setup: () => ({ leaseMs: 2_000 }),
    timeoutMs: 120_000,
    async body({ run, t }) {
      const published = ids('lost-ack', 50);
      const lost = published.filter((_, n) => n % 5 === 0); // 20%
      run.faults.dropAck(lost);
      await run.startConsumer({ label: 'a', concurrency: 4, handler: recordEffect(run, 'a') });
      await run.publish(published.map((id, n) => ({ id, body: { n } })));
      await run.spy.waitForCount('processed', published.length, undefined, t(60_000));
      await waitFor(
        () => lost.every((id) => run.faults.list('ack', { messageId: id, dropped: true }).length === 1),
        {
          timeoutMs: t(10_000),
          description: 'the planned acks to be dropped',
        },
      );
      // The broker never heard those acks: make it hand the messages out again (or, for
      // a harness without forceRedelivery, let their leases lapse).
      if (run.setup.forceRedelivery) for (const id of lost) await run.setup.forceRedelivery(id);
      const deadline = t(
        run.leaseMs * 3 + 30_000,
        'the redelivery of a lost-ack message to be skipped as a duplicate',
      );
      for (const id of lost) {
        await waitFor(() => run.spy.countFor('duplicate', id) > 0, {
          timeoutMs: deadline,
          description: `the redelivery of ${id} (its ack was lost) to be skipped as a duplicate (${run.spy.summary()})`,
        });
      }
      await waitFor(() => lost.every((id) => run.faults.confirmedAcks(id) >= 1), {
        timeoutMs: t(20_000),
        description: 'a confirmed ack of every redelivered message',
      });
      await run.waitForBacklogZero(t(20_000, BACKLOG_ZERO_WAIT));
      expectOneEffectEach(await run.effectCounts(), published);
      for (const id of lost) expect(run.spy.countFor('processed', id), `processed events of ${id}`).toBe(1);
      expect(run.spy.count('processed'), 'processed events').toBe(published.length);
    },
  },
  {
    n: 4,
    slug: 'failure-before-commit',
    title: 'failure before commit: the handler writes its row, then throws on attempt 1',
    // Catches a marker committed outside the handler's transaction: after attempt 1 the
    // marker probe would find it (and the retry would be skipped as a duplicate, leaving
    // no row at all). And an ack after a silent rollback: a handler that swallowed a
    // statement error leaves the transaction aborted, PostgreSQL answers the COMMIT with
    // ROLLBACK, and a store that takes that for a commit acks a message with no row.
    // Both are planted in test/defects.
    missing: (f) => needs(f, 'redeliveryOnRetry'),
    setup: () => ({ leaseMs: 10_000 }),
    timeoutMs: 60_000,
    async body({ run, t }) {
      const id = 'fails-once';
      // Its attempt 1 catches a failed statement and returns: PostgreSQL then answers the
      // COMMIT with ROLLBACK, so that run is a failure (retried), never an ack.
      const swallows = 'swallows-once';
      const others = ids('steady', 3);
      // Hold the retry at the fault injector: nothing can redeliver the message while we
      // inspect the database after attempt 1.
      const retry = run.faults.hold('retryLater', id);
      const attempts: number[] = [];
      await run.startConsumer({
        label: 'a',
        concurrency: 2,
        handler: async (message, ctx) => {
          await run.insertEffect(ctx, message, 'a');
          if (message.id === swallows && ctx.attempt === 1) {
            await ctx.tx.query(run.state.sql.failingStatement).catch(() => {
              // The deliberate mistake: the transaction is aborted, the handler returns.
            });
          }
          if (message.id !== id) return;
          attempts.push(ctx.attempt);
          if (ctx.attempt === 1) throw new Error('planned failure after the business insert (attempt 1)');
        },
      });
      await run.publish([
        { id, body: {} },
        { id: swallows, body: {} },
        ...others.map((other) => ({ id: other, body: {} })),
      ]);
      await run.spy.waitFor('failed', byId(id), t(20_000));
      await within(retry.reached, t(10_000), 'the retry of the failed message to be requested');
      expect(await run.effectsOf(id), 'rows after the failed attempt').toBe(0);
      expect(await run.markerExists(id), 'processed marker after the failed attempt').toBe(false);
      retry.release();
      await run.spy.waitFor('processed', byId(id), t(30_000));
      expect(await run.effectsOf(id), 'rows after the retry').toBe(1);
      expect(await run.markerExists(id), 'processed marker after the retry').toBe(true);
      expect(attempts, 'ctx.attempt of each run of the handler').toEqual([1, 2]);
      await run.spy.waitFor('processed', byId(swallows), t(30_000));
      expect(
        run.spy.countFor('failed', swallows),
        `failed runs of ${swallows} (attempt 1 swallowed a statement error, its COMMIT rolled back: an ack would lose it)`,
      ).toBe(1);
      expect(await run.effectsOf(swallows), `rows of ${swallows} after its retry`).toBe(1);
      const all = [id, swallows, ...others];
      expectOneEffectEach(await run.waitForEffects(all, t(20_000)), all);
    },
  },
  crashScenario(5, 'after-commit'),
  crashScenario(6, 'before-commit'),
  {
    n: 7,
    slug: 'long-handler',
    title: 'long handler: 3× the lease, renewal on',
    // Catches missing lease renewal: the lease would lapse mid-handler and the broker
    // would hand the message out again (receipts 2). Checked red with leaseRenewal: false.
    missing: (f) => needs(f, 'leaseExtension'),
    // 2 s rather than 1 s: renewals every second leave room for a busy event loop.
    setup: () => ({ leaseMs: 2_000 }),
    timeoutMs: 90_000,
    async body({ run, features, t }) {
      const id = 'long-handler';
      const L = run.leaseMs;
      const handler: Handler<any> = async (message, ctx) => {
        await run.insertEffect(ctx, message, 'worker');
        await sleep(3 * L); // the long work under test
      };
      // Free slots (and a competitor) so that a lapsed lease would show as a second receipt.
      await run.startConsumer({ label: 'a', concurrency: 2, handler, handlerTimeoutMs: 3 * L + 30_000 });
      if (features.competingConsumers) {
        await run.startConsumer({ label: 'b', concurrency: 1, handler, handlerTimeoutMs: 3 * L + 30_000 });
      }
      await run.publish([{ id, body: {} }]);
      await run.spy.waitFor('processed', byId(id), t(3 * L + 30_000));
      await run.waitForBacklogZero(t(10_000));
      expect(run.receipts(id), 'receipts of the long-running message').toBe(1);
      expect(run.spy.countFor('leaseRenewed', id), 'lease renewals').toBeGreaterThanOrEqual(1);
      expect(await run.effectsOf(id)).toBe(1);
    },
  },
  {
    n: 8,
    slug: 'lease-lost',
    title: 'lease lost: renewal off, a second consumer receives the redelivery',
    // Catches trusting the broker lease instead of the unique key: the second consumer
    // would apply the message again (2 rows). Where stale acks are detectable, the
    // losing side's settle must surface as ackFailed, never as a crash or a second effect.
    missing: (f) => needs(f, 'competingConsumers'),
    setup: () => ({ leaseMs: 1_000 }),
    timeoutMs: 90_000,
    async body({ run, features, t }) {
      const id = 'lease-lost';
      const follow = 'after-lease-lost';
      const L = run.leaseMs;
      if (!features.leaseExtension && !run.setup.forceRedelivery) {
        throw new HarnessIncompleteError(
          'setup.forceRedelivery',
          'without broker leases, scenario 8 loses the lease by force',
        );
      }
      let holder: string | undefined;
      const handler =
        (label: string): Handler<any> =>
        async (message, ctx) => {
          await run.insertEffect(ctx, message, label);
          if (message.id !== id || holder !== undefined) return;
          holder = label;
          // Without broker leases the loss is forced; otherwise the lease simply lapses.
          if (!features.leaseExtension) await run.setup.forceRedelivery!(id);
          await waitFor(() => run.receipts(id) >= 2, {
            timeoutMs: t(5 * L + 20_000),
            description: 'a second consumer receiving the message after the lease was lost',
          });
        };
      await run.startConsumer({ label: 'a', concurrency: 1, leaseRenewal: false, handler: handler('a') });
      await run.startConsumer({ label: 'b', concurrency: 1, leaseRenewal: false, handler: handler('b') });
      await run.publish([{ id, body: {} }]);
      await waitFor(() => run.spy.countFor('processed', id) + run.spy.countFor('duplicate', id) >= 2, {
        timeoutMs: t(5 * L + 40_000),
        description: `both deliveries of ${id} concluded (${run.spy.summary()})`,
      });
      expect(await run.effectsOf(id), 'effect rows').toBe(1);
      expect(run.spy.countFor('processed', id), 'processed events').toBe(1);
      expect(run.spy.countFor('duplicate', id), 'duplicate events').toBe(1);
      const sources = new Set(run.spy.list('received', byId(id)).map((e) => e.source));
      expect(sources.size, 'consumers that received the message').toBe(2);
      if (features.staleAckDetectable) {
        const failed = await run.spy.waitFor(
          'ackFailed',
          (e) => byId(id)(e) && e.source === holder,
          t(10_000),
        );
        expect(failed.source).toBe(holder);
      }
      // Never a crash: both consumers keep consuming.
      await run.publish([{ id: follow, body: {} }]);
      await run.spy.waitFor('processed', byId(follow), t(20_000));
      await run.waitForBacklogZero(t(20_000));
      expectOneEffectEach(await run.effectCounts(), [id, follow]);
    },
  },
  {
    n: 9,
    slug: 'competing-consumers',
    title: 'competing consumers: forced race on one ID, then 300 messages with duplicates across 3 consumers',
    // Catches races outside the transaction: a dedup check before (or beside) the
    // transaction lets the held pair both apply (2 rows). The first handler is held
    // until the second consumer has received the ID and (best effort) waits on the
    // first one's uncommitted marker in PostgreSQL.
    missing: (f) => needs(f, 'competingConsumers'),
    setup: () => ({ leaseMs: 10_000, partitions: 3 }),
    timeoutMs: 150_000,
    async body({ run, features, t }) {
      const raceId = 'race';
      let first: string | undefined;
      const concluded = (id: string) => run.spy.countFor('processed', id) + run.spy.countFor('duplicate', id);
      const handler =
        (label: string): Handler<any> =>
        async (message, ctx) => {
          await run.insertEffect(ctx, message, label);
          if (message.id !== raceId || first !== undefined) return;
          first = label;
          if (features.brokerDedup) {
            // The broker would drop a republished copy: hand the same message out again instead.
            if (!run.setup.forceRedelivery) {
              throw new HarnessIncompleteError(
                'setup.forceRedelivery',
                'with brokerDedup, scenario 9 forces the second delivery',
              );
            }
            await run.setup.forceRedelivery(raceId);
          }
          await waitFor(() => run.receipts(raceId) >= 2, {
            timeoutMs: t(run.leaseMs + 20_000),
            description: 'the second consumer receiving the raced ID',
          });
          // The race is forced only if the second copy reached the claim while this one
          // holds its uncommitted marker (it waits on the row lock; a dedup gate outside
          // the transaction concludes instead). Neither within the deadline: the race
          // did not happen, and a pass would prove nothing.
          await waitFor(async () => concluded(raceId) > 0 || (await lockWaiters(run)) > 0, {
            timeoutMs: t(10_000),
            description:
              'the second consumer to wait on the uncommitted marker or conclude (the forced race)',
          });
        };
      const a = await run.startConsumer({ label: 'a', concurrency: 1, handler: handler('a') });
      const b = await run.startConsumer({ label: 'b', concurrency: 1, handler: handler('b') });
      await run.publish(
        features.brokerDedup
          ? [{ id: raceId, body: { copy: 1 } }]
          : [
              { id: raceId, body: { copy: 1 } },
              { id: raceId, body: { copy: 2 } },
            ],
      );
      await waitFor(() => concluded(raceId) >= 2, {
        timeoutMs: t(run.leaseMs + 40_000, 'both deliveries of the raced ID concluded'),
        description: `both deliveries of the raced ID concluded (${run.spy.summary()})`,
      });
      expect(await run.effectsOf(raceId), 'effect rows of the raced ID').toBe(1);
      expect(run.spy.countFor('processed', raceId), 'processed events of the raced ID').toBe(1);
      expect(run.spy.countFor('duplicate', raceId), 'duplicate events of the raced ID').toBe(1);
      expect(
        new Set(run.spy.list('received', byId(raceId)).map((e) => e.source)).size,
        'consumers in the race',
      ).toBe(2);
      await Promise.all([a.stop(), b.stop()]);

      // The bulk part: 150 IDs, each published twice back to back, over 3 consumers.
      const published = ids('compete', 150);
      for (const label of ['c1', 'c2', 'c3']) {
        await run.startConsumer({ label, concurrency: 4, handler: recordEffect(run, label) });
      }
      const messages = published.flatMap((id, n) => [
        { id, body: { n, copy: 1 } },
        { id, body: { n, copy: 2 } },
      ]);
      await run.publish(messages);
      await run.waitForEffects(published, t(90_000));
      const bulk = (e: { event: { messageId?: string } }) =>
        e.event.messageId?.startsWith('compete-') === true;
      if (!features.brokerDedup) {
        await waitFor(
          () => run.spy.count('processed', bulk) + run.spy.count('duplicate', bulk) >= messages.length,
          {
            timeoutMs: t(60_000),
            description: `${messages.length} deliveries concluded (${run.spy.summary()})`,
          },
        );
      }
      await run.waitForBacklogZero(t(30_000));
      expectOneEffectEach(await run.effectCounts(), [raceId, ...published]);
      expect(run.spy.count('processed', bulk), 'processed events of the bulk part').toBe(published.length);
      const workers = new Set(run.spy.list('processed', bulk).map((e) => e.source));
      expect(workers.size, 'consumers that processed bulk messages').toBeGreaterThanOrEqual(2);
    },
  },
  {
    n: 10,
    slug: 'poison',
    title: 'poison messages: no ID, unparseable body, a handler that always throws',
    // Catches silent drops (a poison message missing from the dead letters) and crash
    // loops (a poison message received again and again, or the stream behind it stuck).
    missing: () => [],
    setup: () => ({ leaseMs: 10_000 }),
    timeoutMs: 90_000,
    async body({ run, features, t }) {
      const before = ids('calm-before', 10);
      const after = ids('calm-after', 10);
      const badBody = 'poison-body';
      const alwaysFails = 'poison-throws';
      const maxAttempts = features.redeliveryOnRetry ? 3 : 1;
      await run.startConsumer({
        label: 'a',
        concurrency: 2,
        maxAttempts,
        backoff: { initialMs: 50, maxMs: 200 },
        handler: async (message, ctx) => {
          if (message.id === alwaysFails) throw new Error('this handler always fails');
          await run.insertEffect(ctx, message, 'a');
        },
      });
      await run.publish([
        ...before.map((id) => ({ id, body: {} })),
        { body: { note: 'published without an ID' } },
        { id: badBody, body: null, rawBody: '{"unterminated json' },
        { id: alwaysFails, body: {} },
        ...after.map((id) => ({ id, body: {} })),
      ]);
      const healthy = [...before, ...after];
      await run.waitForEffects(healthy, t(30_000));
      const deadLetters = await waitFor(
        async () => {
          const list = await run.setup.deadLetters();
          return list.length >= 3 ? list : undefined;
        },
        { timeoutMs: t(30_000, '3 dead letters'), description: `3 dead letters (${run.spy.summary()})` },
      );
      expect(
        deadLetters.filter((d) => d.reason === 'missing-id'),
        'dead letters with reason missing-id',
      ).toHaveLength(1);
      expect(deadLetters.find((d) => d.id === badBody)?.reason, `dead-letter reason of ${badBody}`).toBe(
        'invalid-body',
      );
      expect(
        deadLetters.find((d) => d.id === alwaysFails)?.reason,
        `dead-letter reason of ${alwaysFails}`,
      ).toBe('max-attempts');
      expect(deadLetters, 'dead letters').toHaveLength(3);
      // The copy can reach the dead-letter destination before the original is settled
      // and the event emitted: wait for the events rather than read them at once.
      await waitFor(() => run.spy.count('deadLettered') >= 3 || undefined, {
        timeoutMs: t(10_000),
        description: `3 deadLettered events (${run.spy.summary()})`,
      });
      const reasons = run.spy.list('deadLettered').map((e) => e.event.reason);
      expect(reasons.sort()).toEqual(['invalid-body', 'max-attempts', 'missing-id']);
      expect(run.receipts(undefined), 'receipts of the message without ID').toBe(1);
      expect(run.receipts(badBody), `receipts of ${badBody}`).toBe(1);
      expect(run.receipts(alwaysFails), `receipts of ${alwaysFails}`).toBe(maxAttempts);
      expect(run.spy.countFor('failed', alwaysFails), `failed attempts of ${alwaysFails}`).toBe(maxAttempts);
      await run.waitForBacklogZero(t(20_000));
      expectOneEffectEach(await run.effectCounts(), healthy);
    },
  },
  {
    n: 11,
    slug: 'retry-delay',
    title: 'retry with delay: fails twice, then succeeds',
    // Catches hot redelivery loops: attempts spaced less than the backoff (a retry that
    // ignores the delay) go red.
    missing: (f) => needs(f, 'redeliveryOnRetry', 'delayedRetry'),
    setup: () => ({ leaseMs: 10_000 }),
    timeoutMs: 60_000,
    async body({ run, t }) {
      const id = 'retry-delay';
      // Far above what a hot retry (a redelivery at once: a receive, a count, a claim)
      // takes on a busy machine, so a retry that ignores the delay shows on every run.
      const initialMs = 1_000;
      // setTimeout may fire a millisecond early against Date.now(); nothing more.
      const toleranceMs = 5;
      const starts: Array<{ attempt: number; at: number }> = [];
      await run.startConsumer({
        label: 'a',
        concurrency: 2,
        maxAttempts: 5,
        backoff: { initialMs, maxMs: 10_000, multiplier: 2, jitter: 0 },
        handler: async (message, ctx) => {
          starts.push({ attempt: ctx.attempt, at: Date.now() });
          await run.insertEffect(ctx, message, 'a');
          if (ctx.attempt <= 2) throw new Error(`planned failure on attempt ${ctx.attempt}`);
        },
      });
      await run.publish([{ id, body: {} }]);
      await waitFor(() => run.spy.countFor('processed', id) > 0, {
        timeoutMs: t(30_000, `${id} processed by its third attempt`),
        description: `${id} processed by its third attempt (${run.spy.summary()})`,
      });
      expect(
        starts.map((s) => s.attempt),
        'attempts',
      ).toEqual([1, 2, 3]);
      const delays = run.spy.list('retried', byId(id)).map((e) => e.event.delayMs ?? 0);
      expect(delays, 'retry delays').toHaveLength(2);
      expect(delays[0]!, 'first retry delay').toBeGreaterThanOrEqual(initialMs);
      expect(delays[1]!, 'second retry delay').toBeGreaterThanOrEqual(2 * initialMs);
      const gap1 = starts[1]!.at - starts[0]!.at;
      const gap2 = starts[2]!.at - starts[1]!.at;
      expect(gap1, 'ms between attempts 1 and 2').toBeGreaterThanOrEqual(delays[0]! - toleranceMs);
      expect(gap2, 'ms between attempts 2 and 3').toBeGreaterThanOrEqual(delays[1]! - toleranceMs);
      expect(await run.effectsOf(id)).toBe(1);
    },
  },
  {
    n: 12,
    slug: 'graceful-stop',
    title: 'graceful stop with work in flight',
    // Catches dropping in-flight work on stop (held handlers not committed or not acked)
    // and stranding prefetched messages (the restarted consumer could only get them after
    // the lease — 20 s — lapses, past this scenario's deadline).
    missing: () => [],
    setup: () => ({ leaseMs: 20_000 }),
    timeoutMs: 90_000,
    async body({ run, t }) {
      const published = ids('stop', 10);
      const gate = run.latch();
      const started: string[] = [];
      const handler =
        (label: string): Handler<any> =>
        async (message, ctx) => {
          const order = started.push(message.id);
          await run.insertEffect(ctx, message, label);
          if (order <= 2) await gate.wait();
        };
      const first = await run.startConsumer({
        label: 'first',
        concurrency: 2,
        handler: handler('first'),
        stopTimeoutMs: 20_000,
      });
      await run.publish(published.map((id, n) => ({ id, body: { n } })));
      await waitFor(() => started.length >= 2, {
        timeoutMs: t(20_000),
        description: 'two handlers in flight',
      });
      const inFlight = started.slice(0, 2);
      const eventsAtStop = run.spy.events.length;
      const stopping = first.stop();
      // stop() has stopped fetching synchronously; now let the in-flight handlers finish.
      gate.open();
      await within(stopping, t(25_000), 'stop() to finish');
      expect(started, 'handlers started by the stopped consumer').toHaveLength(2);
      const fetchedAfterStop = run.spy.events.slice(eventsAtStop).filter((e) => e.name === 'received');
      expect(
        fetchedAfterStop.map((e) => e.event.messageId),
        'messages received after stop()',
      ).toEqual([]);
      for (const id of inFlight) {
        expect(run.spy.countFor('processed', id), `processed events of in-flight ${id}`).toBe(1);
        expect(
          run.faults.list('ack', { messageId: id, ok: true }),
          `confirmed acks of in-flight ${id}`,
        ).toHaveLength(1);
        expect(run.faults.list('release', { messageId: id }), `releases of in-flight ${id}`).toHaveLength(0);
      }
      const dispatched = run.faults.dispatches.filter((d) => d.source === 'first').length;
      const settled = run.faults.settlements.filter((s) => s.source === 'first').length;
      expect(settled, 'settled deliveries of the stopped consumer (every dispatched one)').toBe(dispatched);
      expect(await run.effectCounts(), 'effects after stop').toEqual(new Map(inFlight.map((id) => [id, 1])));

      await run.startConsumer({ label: 'restart', concurrency: 4, handler: handler('restart') });
      // Well within the 20 s lease: released messages come back at once, stranded ones would not.
      const counts = await run.waitForEffects(
        published,
        t(Math.min(10_000, run.leaseMs / 2), effectsWait(published.length)),
      );
      await run.waitForBacklogZero(t(10_000));
      expectOneEffectEach(counts, published);
      const restarted = (e: { source: string }) => e.source === 'restart';
      expect(run.spy.count('duplicate', restarted), 'duplicates after the restart').toBe(0);
      for (const id of inFlight) expect(run.receipts(id), `receipts of completed ${id}`).toBe(1);
    },
  },
  {
    n: 13,
    slug: 'server-disconnect',
    title: 'server-side disconnect mid-stream',
    // Catches a dead consumer after a connection drop (messages after the cut never
    // processed) and losses or doubles around it.
    missing: (f) => needs(f, 'serverSideDisconnect'),
    setup: () => ({ leaseMs: 5_000 }),
    timeoutMs: 150_000,
    async body({ run, t }) {
      if (!run.setup.disconnect)
        throw new HarnessIncompleteError('setup.disconnect', 'feature serverSideDisconnect is declared');
      const published = ids('disconnect', 100);
      const freeRuns = 24;
      let runs = 0;
      let cut = false;
      await run.startConsumer({
        label: 'a',
        concurrency: 4,
        handler: async (message, ctx) => {
          // Runs after the first `freeRuns` wait for the cut, so the stream crosses it: a
          // consumer faster than this test (or a test slowed by load) would otherwise have
          // taken every message before the cut, and a receive loop that dies there would go
          // unseen. Counted by runs, not by message: a broker that hands out later messages
          // first (Kafka's partitions, whose next fetch waits for a held record) must still
          // reach the 20 processed the cut waits for. Bounded, in case of a redelivery storm.
          if (++runs > freeRuns && !cut) {
            await waitFor(() => cut || undefined, { timeoutMs: t(20_000), intervalMs: 20 }).catch(() => {});
          }
          await run.insertEffect(ctx, message, 'a');
          await sleep(10); // keep the stream flowing while the connection is cut
        },
      });
      await run.publish(published.map((id, n) => ({ id, body: { n } })));
      await run.spy.waitForCount('processed', 20, undefined, t(30_000));
      await run.setup.disconnect();
      cut = true;
      const counts = await run.waitForEffects(published, t(120_000, effectsWait(published.length)));
      await run.waitForBacklogZero(t(30_000));
      expectOneEffectEach(counts, published);
    },
  },
  {
    n: 14,
    slug: 'store-outage',
    title: 'store outage through a TCP proxy, longer than max deliveries × lease',
    // Catches failing open (an effect or an ack while the store is down), a consumer
    // that keeps fetching during the outage (receipts pile up, the broker's delivery
    // limit dead-letters healthy messages) and one that never resumes.
    missing: () => [],
    setup: () => ({ leaseMs: 1_000, maxDeliveries: 2 }),
    timeoutMs: 120_000,
    async body({ run, state, t }) {
      const { harness } = state;
      if (!harness.createStoreVia)
        throw new HarnessIncompleteError(
          'createStoreVia',
          'scenario 14 reaches the store through a TCP proxy',
        );
      if (!harness.databaseAddress)
        throw new HarnessIncompleteError('databaseAddress', 'the TCP proxy of scenario 14 forwards to it');
      const L = run.leaseMs;
      const maxDeliveries = 2;
      const concurrency = 2;
      const proxy = new TcpProxy(harness.databaseAddress);
      await proxy.start();
      run.onEnd(() => proxy.close());
      const proxied = await harness.createStoreVia(proxy.port);
      run.onEnd(() => proxied.cleanup());
      await run.startConsumer({
        label: 'a',
        store: proxied.store,
        concurrency,
        // Held deliveries go back to the broker within the outage, exercising release.
        outageHoldMs: L,
        handler: recordEffect(run, 'a'),
      });
      const early = ids('before-outage', 5);
      const late = ids('during-outage', 10);
      await run.publish(early.map((id) => ({ id, body: {} })));
      await run.waitForEffects(early, t(30_000));
      await waitFor(() => early.every((id) => run.faults.confirmedAcks(id) === 1), {
        timeoutMs: t(10_000),
        description: 'the acks of the messages before the outage',
      });

      await proxy.cut();
      const cutAt = Date.now();
      await run.publish(late.map((id) => ({ id, body: {} })));
      await waitFor(() => run.spy.count('storeUnavailable') > 0, {
        timeoutMs: t(30_000, 'the consumer to declare the store unavailable'),
        description:
          'the consumer to declare the store unavailable (a store error taken for a handler failure never is)',
      });
      // The outage under test: deliberately longer than max deliveries × lease.
      await sleep((maxDeliveries + 2) * L);
      const lateEffects = [...(await run.effectCounts()).keys()].filter((id) => late.includes(id));
      expect(lateEffects, 'effects committed while the store was down').toEqual([]);
      const acksDuringOutage = run.faults.settlements.filter(
        (s) => s.kind === 'ack' && s.at >= cutAt && !s.dropped,
      );
      expect(
        acksDuringOutage.map((s) => s.messageId),
        'acks while the store was down',
      ).toEqual([]);
      const receiptsDuringOutage = late.reduce((sum, id) => sum + run.receipts(id), 0);
      expect(
        receiptsDuringOutage,
        'receipts while the store was down (fetching must pause)',
      ).toBeLessThanOrEqual(2 * concurrency);

      await proxy.resume();
      await run.spy.waitFor('storeRecovered', undefined, t(30_000));
      const counts = await run.waitForEffects([...early, ...late], t(60_000));
      await run.waitForBacklogZero(t(30_000));
      expectOneEffectEach(counts, [...early, ...late]);
      expect(await run.setup.deadLetters(), 'dead letters after the outage').toEqual([]);
      expect(run.spy.count('deadLettered'), 'deadLettered events').toBe(0);
    },
  },
  {
    n: 15,
    slug: 'ordering',
    title: 'ordering per key with one retry in the middle',
    // Catches reordering on retry: a broker or adapter that hands out key-b-4 while
    // key-b-3 waits for its retry commits them out of order.
    missing: (f) => needs(f, 'ordering', 'redeliveryOnRetry'),
    setup: () => ({ leaseMs: 10_000, ordered: true, partitions: 3 }),
    timeoutMs: 90_000,
    async body({ run, t }) {
      const keys = ['key-a', 'key-b', 'key-c'];
      const perKey = 8;
      const failing = 'key-b-3';
      const messages = [];
      for (let seq = 0; seq < perKey; seq++) {
        for (const key of keys) messages.push({ id: `${key}-${seq}`, body: { key, seq }, orderingKey: key });
      }
      await run.startConsumer({
        label: 'a',
        concurrency: 3,
        backoff: { initialMs: 100, maxMs: 500 },
        handler: async (message: Message<any>, ctx: HandlerContext<SqlClient>) => {
          const { key, seq } = message.body as { key: string; seq: number };
          await ctx.tx.query(run.insertEffectSql, [message.id, ctx.attempt, 'a', key, seq]);
          if (message.id === failing && ctx.attempt === 1)
            throw new Error('planned failure in the middle of key-b');
        },
      });
      await run.publish(messages);
      const counts = await run.waitForEffects(
        messages.map((m) => m.id),
        t(60_000, effectsWait(messages.length)),
      );
      expectOneEffectEach(
        counts,
        messages.map((m) => m.id),
      );
      expect(run.spy.countFor('retried', failing), `retries of ${failing}`).toBe(1);
      const rows = await run.effectRows();
      for (const key of keys) {
        const order = rows.filter((row) => row.ordering_key === key).map((row) => row.seq);
        expect(order, `commit order of ${key}`).toEqual(Array.from({ length: perKey }, (_, seq) => seq));
      }
    },
  },
  {
    n: 16,
    slug: 'releases-not-attempts',
    title: 'attempts count failures, not deliveries: three releases, then maxAttempts failing runs',
    // Catches a broker delivery count taken as the attempt number (each release would use
    // up maxAttempts: the failing message dead-lettered before its 2 runs, or at once),
    // and a happy path that writes an attempt counter (the fresh message's count is 1
    // only if nothing was written before). Each cycle waits for its holder's `released`
    // event, not for a clock: the three releases are what the first part is about, and
    // when stop() resolves relative to them is scenario 19's business. (It raced a 50 ms
    // stop deadline once: under load the third release landed after stop() returned, and
    // the count read 2, issue 25.)
    missing: (f) => needs(f, 'redeliveryOnRetry'),
    // One partition: with several, each fresh message could be the first of its partition.
    setup: () => ({ leaseMs: 10_000, partitions: 1 }),
    timeoutMs: 120_000,
    async body({ run, t }) {
      const id = 'released-then-failing';
      const maxAttempts = 2;
      await run.publish([{ id, body: {} }]);
      let holds = 0;
      for (let cycle = 1; cycle <= 3; cycle++) {
        const holder = await run.startConsumer({
          label: `holder-${cycle}`,
          concurrency: 1,
          maxAttempts,
          stopTimeoutMs: 50,
          handler: async (_message, ctx) => {
            holds++;
            // Held until stop()'s deadline aborts it: a release, never a failure.
            await aborted(ctx.signal);
            throw ctx.signal.reason;
          },
        });
        await waitFor(() => holds >= cycle || undefined, {
          timeoutMs: t(40_000),
          description: `holder ${cycle} running the message (${run.spy.summary()})`,
        });
        await within(holder.stop(), t(20_000), `holder ${cycle} to stop`);
        const source = `holder-${cycle}`;
        await run.spy
          .waitFor('released', (e) => e.source === source && e.event.messageId === id, t(20_000))
          .catch(() => {
            throw new WaitTimeoutError(`the release of ${id} by ${source} (${run.spy.summary()})`, t(20_000));
          });
      }
      expect(run.spy.countFor('released', id), `releases of ${id}`).toBe(3);
      expect(run.spy.countFor('failed', id), `failures of ${id} while held`).toBe(0);

      let failingRuns = 0;
      const failing = await run.startConsumer({
        label: 'failing',
        concurrency: 1,
        maxAttempts,
        backoff: { initialMs: 50, maxMs: 200 },
        handler: async () => {
          failingRuns++;
          throw new Error('this handler always fails');
        },
      });
      const deadLetter = await waitFor(async () => (await run.setup.deadLetters()).find((d) => d.id === id), {
        timeoutMs: t(40_000, `dead letter of ${id}`),
        description: `dead letter of ${id} (${run.spy.summary()})`,
      });
      expect(deadLetter.reason, `dead-letter reason of ${id}`).toBe('max-attempts');
      expect(failingRuns, `runs of ${id} after its releases`).toBe(maxAttempts);
      await within(failing.stop(), t(20_000), 'the failing consumer to stop');

      // Two fresh messages, one after the other: the first may legitimately be counted
      // up front (Kafka: the first record of a partition after an assignment; SQS: a poll
      // the stopped consumer aborted may have taken it). The second is a plain first
      // delivery and must cost nothing but its marker.
      // Counted through the store's calls, not its rows: the core deletes the counter of
      // a processed message, so a row left behind is no evidence either way.
      const counted: string[] = [];
      await run.startConsumer({
        label: 'happy',
        concurrency: 1,
        handler: recordEffect(run, 'happy'),
        store: countingAttempts(run.store, counted),
      });
      for (const fresh of ['fresh-1', 'fresh-2']) {
        await run.publish([{ id: fresh, body: {} }]);
        await run.spy.waitFor('processed', byId(fresh), t(30_000));
      }
      expect(
        counted.filter((id) => id === 'fresh-2'),
        'attempt counter of a message processed on its first delivery (the runs counted for it)',
      ).toEqual([]);
    },
  },
  {
    n: 17,
    slug: 'crash-loop',
    title: 'a message that crashes the process every time is dead-lettered with max-attempts',
    // Catches attempts counted only when a run ends (a crash never ends: the message would
    // crash every consumer forever) and a crash loop that is dead-lettered without a reason.
    missing: (f) => needs(f, 'crossProcess'),
    setup: () => ({ leaseMs: 2_000 }),
    timeoutMs: 240_000,
    async body(context) {
      const { run, t } = context;
      const id = 'crashes-every-time';
      const crashes = 3;
      const maxAttempts = 2;
      await run.publish([{ id, body: {} }]);
      for (let crash = 1; crash <= crashes; crash++) {
        const child = await startScenarioChild(context, { point: 'before-commit', messageId: id }, 10);
        expect(await child.crashed(t(run.leaseMs * 3 + 40_000)), `crash ${crash}`).toEqual({
          point: 'before-commit',
          messageId: id,
        });
      }
      let runs = 0;
      await run.startConsumer({
        label: 'survivor',
        concurrency: 1,
        maxAttempts,
        handler: async () => {
          runs++;
        },
      });
      const deadLetter = await waitFor(async () => (await run.setup.deadLetters()).find((d) => d.id === id), {
        timeoutMs: t(run.leaseMs * 3 + 40_000, `dead letter of ${id}`),
        description: `dead letter of ${id} (${run.spy.summary()})`,
      });
      expect(deadLetter.reason, `dead-letter reason of ${id}`).toBe('max-attempts');
      // The first delivery's crash may go uncounted (a first delivery writes nothing up
      // front), so after 3 crashes at least 2 are on record: past maxAttempts 2.
      expect(runs, `runs of ${id} in the surviving consumer`).toBe(0);
      expect(await run.effectsOf(id), 'effect rows').toBe(0);
    },
  },
  {
    n: 18,
    slug: 'no-retention',
    title:
      'a long run keeps nothing per message: live promises, signals and timers do not grow with the messages',
    // Catches state kept for the consumer's lifetime per message processed: a Promise.race
    // against a promise that lives as long as the adapter (each race leaves a reaction on
    // it until that promise settles: two live promises per message, the Kafka adapter's
    // close() wait before 418b5ac), a per-delivery signal kept reachable, a timer never
    // cleared. A consumer runs for months, and a few hundred bytes per message is an
    // out-of-memory crash after some millions. Counted with v8.queryObjects, which collects
    // garbage first: only what is reachable. (Listeners and plain objects are not counted:
    // the suite's own records grow per message.)
    missing: () => [],
    setup: () => ({ leaseMs: 30_000, partitions: 4 }),
    timeoutMs: 180_000,
    async body({ run, t }) {
      // The warm-up fills what is built once (connections, links, pools, caches).
      const warm = ids('retain-warm', 200);
      const measured = ids('retain', 2_000);
      await run.startConsumer({ label: 'a', concurrency: 8, handler: recordEffect(run, 'a') });
      await run.publish(warm.map((id, n) => ({ id, body: { n } })));
      await run.waitForEffects(warm, t(60_000));
      await run.spy.waitForCount('processed', warm.length, undefined, t(10_000));
      const before = liveObjects();
      await run.publish(measured.map((id, n) => ({ id, body: { n } })));
      await run.waitForEffects(measured, t(120_000));
      await run.spy.waitForCount('processed', warm.length + measured.length, undefined, t(10_000));
      await run.waitForBacklogZero(t(20_000));
      const after = liveObjects();
      // Bounded caches and whatever a poll has in hand may differ by a little; a leak
      // grows by at least one object per message.
      const allowed = measured.length / 10;
      for (const kind of Object.keys(before) as Array<keyof LiveObjects>) {
        expect(
          after[kind] - before[kind],
          `live ${kind} objects gained over ${measured.length} messages (before ${before[kind]}, after ${after[kind]})`,
        ).toBeLessThan(allowed);
      }
    },
  },
  {
    n: 19,
    slug: 'stop-settles',
    title:
      'stop with handlers in flight and a slow release path: released before stop() resolves, available at once',
    // Catches closing the adapter (or the store) before the deliveries that stop() aborted
    // have settled: with a rollback that takes a while, a release sent after the close
    // fails (ackFailed, no `released` event) or lands after stop() returned, and the
    // message stays invisible until its lease lapses. Checked red against the core before
    // it waited for its releases (stop() resolved one stopTimeoutMs after the abort:
    // released [] at once, 3 later on the memory broker; 0 ever on the PostgreSQL-table
    // queue, whose close() ends its pool) and with the planted defect 'close-on-stop'.
    missing: () => [],
    // A lease far longer than the wait for the message to come back: "available at once",
    // not "after its lease". Three partitions: one record each, all three in flight.
    setup: () => ({ leaseMs: 60_000, partitions: 3 }),
    timeoutMs: 180_000,
    async body({ run, t }) {
      const held = ids('stop-held', 3);
      const started = new Set<string>();
      const holder = await run.startConsumer({
        label: 'holder',
        concurrency: held.length,
        // The handlers are aborted at once; the grace is generous: it bounds a broken
        // release path, it is not what is measured.
        stopTimeoutMs: 50,
        stopGraceMs: t(60_000),
        store: slowRollbacks(run.store, ROLLBACK_DELAY_MS),
        handler: async (message, ctx) => {
          started.add(message.id);
          await aborted(ctx.signal);
          throw ctx.signal.reason;
        },
      });
      await run.publish(held.map((id, n) => ({ id, body: { n } })));
      await waitFor(() => started.size === held.length || undefined, {
        timeoutMs: t(40_000),
        description: `${held.length} handlers in flight (${run.spy.summary()})`,
      });
      await within(holder.stop(), t(120_000), 'stop() to resolve');
      // Read the moment stop() resolved: every aborted delivery must be settled by now.
      const released = held.filter((id) => run.spy.countFor('released', id) === 1);
      expect(released, 'messages released by the time stop() resolved').toEqual(held);
      for (const id of held) {
        expect(
          run.faults.list('release', { messageId: id, ok: true }),
          `confirmed releases of ${id} by the time stop() resolved`,
        ).toHaveLength(1);
      }
      expect(
        run.spy.list('ackFailed').map((e) => e.event.messageId),
        'failed settlements (a release after the close)',
      ).toEqual([]);
      expect(run.spy.count('failed'), 'failures (an aborted run is a release)').toBe(0);

      // Given back, so a new consumer gets them at once: well within the lease.
      await run.startConsumer({
        label: 'after',
        concurrency: held.length,
        handler: recordEffect(run, 'after'),
      });
      const counts = await run.waitForEffects(
        held,
        t(Math.min(20_000, run.leaseMs / 3), effectsWait(held.length)),
      );
      await run.waitForBacklogZero(t(20_000));
      expectOneEffectEach(counts, held);
    },
  },
];

/** Added to every rollback of scenario 19's holder: its release path is slow. */
const ROLLBACK_DELAY_MS = 500;

/**
 * `store` whose transactions and savepoints, when their work throws, wait `delayMs`
 * before they roll back: the release path of an aborted run (the batch path rolls back
 * to a savepoint) takes that much longer.
 */
function slowRollbacks(store: IdempotencyStore<SqlClient>, delayMs: number): IdempotencyStore<SqlClient> {
  const slowly =
    <T>(work: () => Promise<T>) =>
    async (): Promise<T> => {
      try {
        return await work();
      } catch (error) {
        await sleep(delayMs);
        throw error;
      }
    };
  return new Proxy(store, {
    get(target, property) {
      if (property === 'transaction') {
        return <T>(work: (tx: SqlClient) => Promise<T>) =>
          target.transaction((tx) => slowly(() => work(tx))());
      }
      if (property === 'savepoint') {
        return <T>(tx: SqlClient, work: () => Promise<T>) => target.savepoint(tx, slowly(work));
      }
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** Resolves once `signal` aborts (at once if it already has). */
function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** Sessions of this database waiting on a lock (the racing consumer's claim). */
async function lockWaiters(run: ScenarioRun): Promise<number> {
  const [row] = await run.sql<{ n: string }>(run.state.sql.lockWaiters);
  return Number(row?.n ?? 0);
}

/**
 * Starts the crash-test child consumer of a crossProcess scenario on the run's consumer
 * name, store and effects table, with its crash point, and waits until it consumes. It is
 * killed when the scenario ends.
 */
async function startScenarioChild(
  { run, state, t }: ScenarioContext,
  crash: { point: CrashPoint; messageId: string },
  maxAttempts: number,
): Promise<CrashingChild> {
  const { harness, storeHandle } = state;
  if (!harness.childModule)
    throw new HarnessIncompleteError(
      'childModule',
      'crossProcess scenarios run a consumer in a child process',
    );
  if (storeHandle.childConfig === undefined) {
    throw new HarnessIncompleteError(
      'createStore().childConfig',
      'the child process rebuilds the store from it',
    );
  }
  const idStrategy = typeof harness.idStrategy === 'function' ? undefined : harness.idStrategy;
  const child = startCrashingChild({
    childModule: harness.childModule,
    brokerConfig: JSON.parse(JSON.stringify(run.setup.brokerConfig())),
    storeConfig: storeHandle.childConfig,
    consumer: {
      name: run.consumerName,
      concurrency: 1,
      ...(idStrategy === undefined ? {} : { idStrategy }),
      maxAttempts,
      backoff: { initialMs: 100, maxMs: 2000 },
      handlerTimeoutMs: 60_000,
    },
    effectsTable: run.table,
    insertEffect: run.insertEffectSql,
    crash,
    maxLifetimeMs: t(120_000),
  });
  run.onEnd(() => child.kill());
  await child.ready(t(30_000));
  return child;
}

/** Scenarios 5 and 6: a consumer child process SIGKILLed after / before the commit. */
function crashScenario(n: 5 | 6, point: CrashPoint): Scenario {
  const after = point === 'after-commit';
  return {
    n,
    slug: after ? 'crash-after-commit' : 'crash-before-commit',
    title: after
      ? 'crash between commit and ack: the consumer process is SIGKILLed right after the commit'
      : 'crash before commit: SIGKILL after the business insert, before the commit',
    // after-commit catches an ack sent before the commit (the message would be gone: no
    // redelivery, no duplicate event) and a lost marker (the redelivery would be
    // processed again: 2 rows). before-commit catches a marker saved first in its own
    // commit (the redelivery would be skipped as a duplicate: 0 rows).
    missing: (f) => needs(f, 'crossProcess'),
    setup: () => ({ leaseMs: 2_000 }),
    timeoutMs: 120_000,
    async body(context) {
      const { run, t } = context;
      const id = `crash-${point}`;
      const child = await startScenarioChild(context, { point, messageId: id }, 5);
      await run.publish([{ id, body: {} }]);
      const crashed = await child.crashed(t(30_000));
      expect(crashed).toEqual({ point, messageId: id });
      expect(child.received, 'what the child received').toEqual([id]);
      // What the killed process left behind.
      expect(await run.effectsOf(id), `rows after SIGKILL ${point}`).toBe(after ? 1 : 0);
      expect(await run.markerExists(id), `processed marker after SIGKILL ${point}`).toBe(after);

      await run.startConsumer({
        label: 'successor',
        concurrency: 1,
        handler: recordEffect(run, 'successor'),
      });
      // The broker hands the unacked message out again once it notices the dead consumer
      // (closed connection, or a lapsed lease).
      const concluded = after ? 'duplicate' : 'processed';
      await waitFor(() => run.spy.countFor(concluded, id) > 0, {
        timeoutMs: t(
          run.leaseMs * 3 + 30_000,
          `the successor to receive ${id} again and conclude it as ${concluded}`,
        ),
        description: `the successor to receive ${id} again and conclude it as ${concluded} (${run.spy.summary()})`,
      });
      await run.waitForBacklogZero(t(20_000));
      expect(run.spy.countFor('duplicate', id), 'duplicate events of the successor').toBe(after ? 1 : 0);
      expect(run.spy.countFor('processed', id), 'processed events of the successor').toBe(after ? 0 : 1);
      expect(await run.effectsOf(id), 'effect rows').toBe(1);
    },
  };
}
