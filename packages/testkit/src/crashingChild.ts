import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CHILD_PLAN_ENV, type ChildPlan, type ChildReport, type CrashPoint } from './childProtocol.js';
import { ChildProcessError } from './errors.js';

/**
 * A running crash-test child process.
 *
 * @example
 * ```ts
 * const child: CrashingChild = startCrashingChild(plan);
 * await child.ready(20000);
 * ```
 */
export interface CrashingChild {
  readonly process: ChildProcess;
  /** Message IDs the child's consumer received, in order. */
  readonly received: ReadonlyArray<string | undefined>;
  /** Resolves once the child's consumer has started; rejects if the child fails first or after `timeoutMs`. */
  ready(timeoutMs: number): Promise<void>;
  /**
   * Resolves once the child has reported its crash point, been SIGKILLed there and
   * exited; rejects if the child ends or fails otherwise, or after `timeoutMs`.
   */
  crashed(timeoutMs: number): Promise<{ point: CrashPoint; messageId: string }>;
  /** SIGKILLs the child (if still alive) and waits for it to exit. */
  kill(): Promise<void>;
  /** The tail of the child's stdout and stderr, for failure messages. */
  output(): string;
}

const OUTPUT_TAIL = 20_000;

/**
 * Starts the crash-test child process (`dist/childConsumer.js`) with `plan`. The child
 * builds its store and broker config through the harness's child module, consumes, and
 * freezes at the planned crash point, which the parent turns into a SIGKILL.
 *
 * @example
 * ```ts
 * const child = startCrashingChild(plan);
 * await child.ready(20000);
 * await setup.publish([{ id: 'm-1', body: {} }]);
 * await child.crashed(30000); // SIGKILLed right after the commit of m-1
 * ```
 */
export function startCrashingChild(plan: ChildPlan): CrashingChild {
  const script = childScriptPath();
  const child = spawn(process.execPath, [script], {
    cwd: process.cwd(),
    env: { ...process.env, [CHILD_PLAN_ENV]: JSON.stringify(plan) },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let output = '';
  const append = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-OUTPUT_TAIL);
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);

  const received: Array<string | undefined> = [];
  const reports: ChildReport[] = [];
  const listeners = new Set<() => void>();
  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      for (const notify of listeners) notify();
      resolve();
    });
  });
  child.on('error', (error) => {
    append(Buffer.from(`spawn error: ${error.message}\n`));
  });
  child.on('message', (message: ChildReport) => {
    if (message.type === 'received') received.push(message.messageId);
    reports.push(message);
    for (const notify of listeners) notify();
  });

  const fail = (message: string) => new ChildProcessError(message, output);

  /** Resolves with the first report of `type`, rejecting on error reports, early exit or timeout. */
  const awaitReport = <T extends ChildReport['type']>(type: T, timeoutMs: number) =>
    new Promise<Extract<ChildReport, { type: T }>>((resolve, reject) => {
      const check = () => {
        const error = reports.find((r) => r.type === 'error');
        if (error && error.type === 'error')
          return done(() => reject(fail(`child failed: ${error.message}`)));
        const found = reports.find((r) => r.type === type);
        if (found) return done(() => resolve(found as Extract<ChildReport, { type: T }>));
        if (exited) {
          return done(() =>
            reject(fail(`child exited (code ${exited?.code}, signal ${exited?.signal}) before '${type}'`)),
          );
        }
      };
      const timer = setTimeout(
        () => done(() => reject(fail(`no '${type}' from the child within ${timeoutMs} ms`))),
        timeoutMs,
      );
      const done = (settle: () => void) => {
        clearTimeout(timer);
        listeners.delete(check);
        settle();
      };
      listeners.add(check);
      check();
    });

  const kill = async () => {
    if (!exited) {
      child.kill('SIGKILL');
      await exit;
    }
  };

  return {
    process: child,
    received,
    async ready(timeoutMs) {
      try {
        await awaitReport('ready', timeoutMs);
      } catch (error) {
        await kill();
        throw error;
      }
    },
    async crashed(timeoutMs) {
      let point: Extract<ChildReport, { type: 'crash-point' }>;
      try {
        point = await awaitReport('crash-point', timeoutMs);
      } catch (error) {
        await kill();
        throw error;
      }
      // SIGKILL: no handler, no finally block, no graceful close runs; connections die
      // as they do when a machine loses power.
      await kill();
      return { point: point.point, messageId: point.messageId };
    },
    kill,
    output: () => output,
  };
}

/** dist/childConsumer.js next to this module (or, when run from src by a TS loader, in ../dist). */
function childScriptPath(): string {
  const beside = fileURLToPath(new URL('./childConsumer.js', import.meta.url));
  if (existsSync(beside)) return beside;
  const built = fileURLToPath(new URL('../dist/childConsumer.js', import.meta.url));
  if (existsSync(built)) return built;
  throw new ChildProcessError(
    `cannot find the child script (looked at ${beside} and ${built}); build @oncely/testkit`,
  );
}
