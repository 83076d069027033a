import { randomBytes } from 'node:crypto';

/** A unique entity name per test, so tests never share a queue. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

/**
 * Waits until `check` returns a truthy value, polling every 10 ms, or throws after `timeoutMs`
 * (a bound for a hang, not a measure: a loaded runner stalls for seconds).
 */
export async function waitUntil<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  description: string,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Resolves after `ms` (only for simulated handler work, never to wait for an outcome). */
export function work(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
