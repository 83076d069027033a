import { ServiceMissingError } from './errors.js';

/**
 * Checks that a service a test needs is reachable by running `probe`. When the probe
 * fails: with `CI=true` it throws a {@link ServiceMissingError} (a missing service must
 * fail the suite in CI); elsewhere it warns and resolves false, so the caller can skip
 * with a reason.
 *
 * @example
 * ```ts
 * const hasPostgres = await requireService('PostgreSQL', () => store.ping());
 * describe.skipIf(!hasPostgres)('memory broker conformance (needs PostgreSQL)', () => { ... });
 * ```
 */
export async function requireService(
  name: string,
  probe: () => unknown | Promise<unknown>,
  options: { timeoutMs?: number } = {},
): Promise<boolean> {
  const { timeoutMs = 5000 } = options;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      Promise.resolve().then(probe),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`probe did not answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    return true;
  } catch (error) {
    if (process.env.CI === 'true') throw new ServiceMissingError(name, { cause: error });
    const reason = error instanceof Error ? error.message : String(error);
    console.warn(`[oncely testkit] ${name} is not reachable (${reason}); skipping the tests that need it`);
    return false;
  } finally {
    clearTimeout(timer);
  }
}
