import type { BackoffConfig } from './types.js';

/** Defaults for {@link BackoffConfig}. */
export const DEFAULT_BACKOFF: Required<BackoffConfig> = {
  initialMs: 1000,
  maxMs: 60_000,
  multiplier: 2,
  jitter: 0.2,
};

/**
 * Delay before retrying after failed attempt number `attempt` (1-based): exponential,
 * capped at `maxMs`, plus up to `jitter` × delay of random spread. Jitter only adds, so
 * a retry never comes sooner than the configured backoff.
 *
 * @example
 * ```ts
 * retryDelayMs(3, { initialMs: 1000, maxMs: 60000 }); // 4000..4800
 * ```
 */
export function retryDelayMs(
  attempt: number,
  config: Partial<BackoffConfig> = {},
  random = Math.random,
): number {
  const { initialMs, maxMs, multiplier, jitter } = { ...DEFAULT_BACKOFF, ...config };
  const base = Math.min(maxMs, initialMs * multiplier ** Math.max(0, attempt - 1));
  return Math.min(maxMs, Math.round(base + base * jitter * random()));
}

/**
 * Waits `ms`, or less when `signal` aborts (stop): an adapter's pause between polls or
 * after a broker error, which must not hold up a stop. Never rejects; the timer and the
 * listener are both gone once it resolves.
 *
 * @example
 * ```ts
 * await pauseUnlessAborted(retryDelayMs(failures, { initialMs: 100, maxMs: 5000 }), runtime.stopping);
 * ```
 */
export function pauseUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
