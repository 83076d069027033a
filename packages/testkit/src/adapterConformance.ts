import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { SCENARIOS } from './adapterScenarios/index.js';
import type { AdapterFeatures, AdapterHarness, StoreHandle } from './harness.js';
import { harnessDialect, loadHarnessAdapter, ScenarioRun, type SuiteState, suiteDdl } from './ScenarioRun.js';

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
   * Run only these scenario numbers (1–20), for debugging an adapter. The others are
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

/**
 * Registers the adapter conformance suite (shared/CONFORMANCE.md scenarios 1–15, plus 16
 * and 17 on counting attempts, 18 on what a long run retains, 19 on what stop()
 * settles before it resolves and 20 on a stop() while the adapter is starting) as vitest tests. Every adapter runs it against its real broker or emulator; each scenario
 * builds its consumers with `new Consumer(config, adapter)` around the harness's
 * adapter wrapped in a {@link FaultInjector}, writes every effect as a row of a real
 * PostgreSQL table through `ctx.tx`, and checks by counting rows. A scenario whose
 * feature the adapter declares absent is registered as skipped, with the missing
 * feature's name in its title. The scenarios themselves are in `adapterScenarios/`, one
 * file per concern (delivery, crashes, leases, failures, stopping, outages, ordering,
 * retention).
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
// Planted-defect runs: how a `mustFail` symptom is recognised
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
