import { OncelyError, type OncelyErrorCode } from '@oncely/core';

/**
 * Stable codes of the testkit's own errors.
 *
 * @example
 * ```ts
 * if (error instanceof TestkitError && error.code === ('WAIT_TIMEOUT' satisfies TestkitErrorCode)) retry();
 * ```
 */
export type TestkitErrorCode = 'WAIT_TIMEOUT' | 'SERVICE_MISSING' | 'HARNESS_INCOMPLETE' | 'CHILD_PROCESS';

/**
 * Base class of the testkit's errors: an {@link OncelyError} with a testkit code.
 *
 * @example
 * ```ts
 * try { await waitFor(() => false, { timeoutMs: 10 }); } catch (e) { if (e instanceof TestkitError) console.log(e.code); }
 * ```
 */
export class TestkitError extends OncelyError {
  constructor(code: TestkitErrorCode, message: string, options?: ErrorOptions) {
    // Core's code union lists core's codes only; the testkit's codes are stable strings
    // of their own (see TestkitErrorCode), so the cast widens rather than lies.
    super(code as unknown as OncelyErrorCode, message, options);
  }
}

/**
 * A condition or event did not come within its deadline. The message says what was
 * awaited and what was last seen, so a red test explains itself.
 *
 * @example
 * ```ts
 * await waitFor(async () => (await countRows()) === 10, { timeoutMs: 5000, description: '10 effect rows' });
 * // WaitTimeoutError: timed out after 5000 ms waiting for 10 effect rows (last seen: false)
 * ```
 */
export class WaitTimeoutError extends TestkitError {
  constructor(
    readonly description: string,
    readonly timeoutMs: number,
    readonly lastSeen?: unknown,
  ) {
    super(
      'WAIT_TIMEOUT',
      `timed out after ${timeoutMs} ms waiting for ${description}${lastSeen === undefined ? '' : ` (last seen: ${show(lastSeen)})`}`,
    );
  }
}

/**
 * A service a test needs is not reachable while `CI=true`: the suite must fail rather
 * than skip.
 *
 * @example
 * ```ts
 * await requireService('PostgreSQL', probe); // throws ServiceMissingError in CI when the probe fails
 * ```
 */
export class ServiceMissingError extends TestkitError {
  constructor(
    readonly service: string,
    options?: ErrorOptions,
  ) {
    super(
      'SERVICE_MISSING',
      `${service} is not reachable and CI=true: a missing service fails the suite in CI`,
      options,
    );
  }
}

/**
 * The harness lacks something a scenario needs (for example `createStoreVia` for the
 * store-outage scenario).
 *
 * @example
 * ```ts
 * throw new HarnessIncompleteError('createStoreVia', 'scenario 14 reaches the store through a TCP proxy');
 * ```
 */
export class HarnessIncompleteError extends TestkitError {
  constructor(
    readonly member: string,
    why: string,
  ) {
    super('HARNESS_INCOMPLETE', `the adapter harness must provide ${member}: ${why}`);
  }
}

/**
 * The crash-test child process failed in a way the scenario did not plan (exited early,
 * reported an error).
 *
 * @example
 * ```ts
 * throw new ChildProcessError('child exited with code 1 before reaching after-commit', stderrTail);
 * ```
 */
export class ChildProcessError extends TestkitError {
  constructor(
    message: string,
    readonly output?: string,
  ) {
    super('CHILD_PROCESS', output ? `${message}\n--- child output ---\n${output}` : message);
  }
}

function show(value: unknown): string {
  try {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    return text.length > 300 ? `${text.slice(0, 300)}…` : text;
  } catch {
    return String(value);
  }
}
