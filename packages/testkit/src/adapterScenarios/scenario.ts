/**
 * What a conformance scenario is (its number, the features it needs, its setup and body)
 * and the helpers more than one scenario uses: IDs, effect handlers and checks, waits.
 */
import type { Handler } from '@oncely/core';
import { expect } from 'vitest';
import { WaitTimeoutError } from '../errors.js';
import type { AdapterFeatures, SetupOptions } from '../harness.js';
import type { ScenarioRun, SuiteState } from '../ScenarioRun.js';

/** What a scenario body gets. */
export interface ScenarioContext {
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

export interface Scenario {
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

export function ids(prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
}

export function needs(features: AdapterFeatures, ...names: Array<keyof AdapterFeatures>): string[] {
  return names.filter((name) => {
    const value = features[name];
    return name === 'ordering' ? value === 'none' : value !== true;
  });
}

/** A handler that writes one effect row per message, as `label`. */
export function recordEffect(run: ScenarioRun, label: string): Handler<any> {
  return async (message, ctx) => {
    await run.insertEffect(ctx, message, label);
  };
}

/** Asserts exactly one committed effect per ID and nothing else. */
export function expectOneEffectEach(
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
export async function within<T>(promise: Promise<T>, ms: number, description: string): Promise<T> {
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

/** Resolves once `signal` aborts (at once if it already has). */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

export const byId = (messageId: string) => (e: { event: { messageId?: string } }) =>
  e.event.messageId === messageId;
