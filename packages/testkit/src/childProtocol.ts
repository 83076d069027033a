import type { BackoffConfig, BrokerConfig, IdStrategy } from '@oncely/core';

/**
 * Where the crash-test child stops (and is SIGKILLed by the parent).
 *
 * @example
 * ```ts
 * const point: CrashPoint = 'after-commit';
 * ```
 */
export type CrashPoint = 'after-commit' | 'before-commit';

/**
 * What the parent tells the crash-test child (as JSON in {@link CHILD_PLAN_ENV}).
 * Everything here must survive JSON.
 *
 * @example
 * ```ts
 * const child = startCrashingChild(plan); // plan: ChildPlan, built by scenarios 5 and 6
 * ```
 */
export interface ChildPlan {
  /** Path or file URL of the harness's child module (see AdapterHarness.childModule). */
  childModule: string;
  brokerConfig: BrokerConfig;
  /** StoreHandle.childConfig of the parent's store. */
  storeConfig: unknown;
  consumer: {
    name: string;
    concurrency: number;
    /** Only when it is not a function. */
    idStrategy?: Exclude<IdStrategy, (...args: any[]) => unknown>;
    maxAttempts: number;
    backoff: Partial<BackoffConfig>;
    handlerTimeoutMs: number;
  };
  /** Fully qualified, already quoted effects table (built by the suite from safe characters). */
  effectsTable: string;
  /**
   * The effect's INSERT in the store's SQL dialect (placeholders for message_id, attempt,
   * consumer, ordering_key, seq). @default PostgreSQL's, with `$1`..`$5`
   */
  insertEffect?: string;
  crash: { point: CrashPoint; messageId: string };
  /** The child exits on its own after this long (no orphans if the parent forgets it). */
  maxLifetimeMs: number;
}

/**
 * Messages the child sends the parent over the IPC channel.
 *
 * @example
 * ```ts
 * process.send?.({ type: 'crash-point', point: 'after-commit', messageId: 'm-1' } satisfies ChildReport);
 * ```
 */
export type ChildReport =
  | { type: 'ready' }
  | { type: 'received'; messageId?: string }
  | { type: 'crash-point'; point: CrashPoint; messageId: string }
  | { type: 'error'; message: string };

/** Environment variable carrying the {@link ChildPlan}. */
export const CHILD_PLAN_ENV = 'ONCELY_CONFORMANCE_CHILD';
