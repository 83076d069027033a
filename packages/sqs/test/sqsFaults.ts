import { SQSClient, SQSServiceException } from '@aws-sdk/client-sqs';
import { CREDENTIALS } from './fauxqs.js';

/**
 * A real SQSClient for fauxqs with a fault-injection and counting middleware at the
 * `initialize` step (before the SDK's own retries, so an injected error is what the SDK
 * hands back after giving up). Every other call reaches fauxqs untouched.
 */
export interface FaultyClient {
  client: SQSClient;
  /** Commands sent so far, by name (counted before any injected failure). */
  calls: Map<string, number>;
  /** Epoch ms of each call of a command, in order. */
  callTimes(command: string): number[];
  /** The next `times` calls of `command` fail with an SQS error of code `code`. */
  failNext(command: string, times: number, code?: string): void;
  /** The next `times` calls of `command` reach fauxqs, but their answer is replaced by an error (a lost response). */
  loseResponseOfNext(command: string, times: number, code?: string): void;
  /** Calls of `command` that were failed on purpose. */
  injected(command: string): number;
  /** Runs `hook` when `command` is sent (before it is passed on). */
  onCall(command: string, hook: (input: Record<string, unknown>) => void | Promise<void>): void;
  destroy(): void;
}

export function faultyClient(endpoint: string): FaultyClient {
  const client = new SQSClient({ endpoint, region: 'us-east-1', credentials: CREDENTIALS });
  const calls = new Map<string, number>();
  const times = new Map<string, number[]>();
  const failures = new Map<string, { left: number; code: string }>();
  const lostResponses = new Map<string, { left: number; code: string }>();
  const injected = new Map<string, number>();
  const hooks = new Map<string, Array<(input: Record<string, unknown>) => void | Promise<void>>>();
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = (context.commandName ?? '?').replace(/Command$/, '');
      calls.set(name, (calls.get(name) ?? 0) + 1);
      if (!times.has(name)) times.set(name, []);
      times.get(name)!.push(Date.now());
      for (const hook of hooks.get(name) ?? []) await hook(args.input as Record<string, unknown>);
      const failure = failures.get(name);
      if (failure && failure.left > 0) {
        failure.left--;
        injected.set(name, (injected.get(name) ?? 0) + 1);
        throw new SQSServiceException({
          name: failure.code,
          $fault: 'client',
          $metadata: { httpStatusCode: 400 },
          message: `injected ${failure.code}`,
        });
      }
      const result = await next(args);
      const lost = lostResponses.get(name);
      if (lost && lost.left > 0) {
        lost.left--;
        injected.set(name, (injected.get(name) ?? 0) + 1);
        throw new SQSServiceException({
          name: lost.code,
          $fault: 'server',
          $metadata: { httpStatusCode: 500 },
          message: `injected ${lost.code} after the call went through`,
        });
      }
      return result;
    },
    { step: 'initialize', name: 'oncelyFaults' },
  );
  return {
    client,
    calls,
    callTimes: (command) => times.get(command) ?? [],
    failNext(command, count, code = 'RequestThrottled') {
      failures.set(command, { left: count, code });
    },
    loseResponseOfNext(command, count, code = 'InternalError') {
      lostResponses.set(command, { left: count, code });
    },
    injected: (command) => injected.get(command) ?? 0,
    onCall(command, hook) {
      if (!hooks.has(command)) hooks.set(command, []);
      hooks.get(command)!.push(hook);
    },
    destroy: () => client.destroy(),
  };
}
