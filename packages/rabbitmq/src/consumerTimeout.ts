import type { DiagnoseFinding } from '@oncely/core';
import type { RabbitMqQueueType } from './options.js';

/**
 * RabbitMQ's default `consumer_timeout` since 3.8.17: 30 minutes.
 *
 * @example
 * ```ts
 * const broker = { type: 'rabbitmq', url, queue: 'payments', consumerTimeoutMs: DEFAULT_CONSUMER_TIMEOUT_MS };
 * ```
 */
export const DEFAULT_CONSUMER_TIMEOUT_MS = 1_800_000;

/** The broker checks delivery timeouts about once a minute; values below that are unsupported. */
const CHECK_PERIOD_MS = 60_000;

/** What the consumer-timeout check needs to know. */
export interface ConsumerTimeoutInput {
  /** The server's value as configured in the options; undefined = not told (assume the default). */
  consumerTimeoutMs: number | false | undefined;
  /** How long a handler may run; undefined when the adapter was not told. */
  handlerTimeoutMs: number | undefined;
  /** How long a delivery may be held during a store outage. */
  outageHoldMs: number | undefined;
  prefetch: number;
  concurrency: number;
  queueType: RabbitMqQueueType;
  /** `x.y.z` from the connection's server properties, when connected. */
  serverVersion?: string;
}

/**
 * Compares how long a delivery can stay unacknowledged with the server's
 * `consumer_timeout`. When a delivery outlives it, RabbitMQ closes the whole channel
 * (before 4.3) or cancels the consumer (4.3+, quorum queues only), and every delivery in
 * flight on it is requeued: a handler that can outlive the timeout turns into a
 * redelivery loop. That is an `'error'` when the server's value was given in
 * `consumerTimeoutMs`, a `'warn'` when the default of 30 minutes is only assumed.
 *
 * @example
 * ```ts
 * consumerTimeoutFindings({ consumerTimeoutMs: 60000, handlerTimeoutMs: 120000, outageHoldMs: 60000, prefetch: 10, concurrency: 10, queueType: 'classic' });
 * // [{ level: 'error', message: 'handlerTimeoutMs (120000 ms) is not below ...' }, ...]
 * ```
 */
export function consumerTimeoutFindings(input: ConsumerTimeoutInput): DiagnoseFinding[] {
  const findings: DiagnoseFinding[] = [];
  const { consumerTimeoutMs, handlerTimeoutMs, outageHoldMs, prefetch, concurrency } = input;
  if (consumerTimeoutMs === false) {
    findings.push({
      level: 'ok',
      message:
        'consumer_timeout is disabled on the server (consumerTimeoutMs: false): a stuck delivery is held until handlerTimeoutMs aborts its handler',
    });
    return findings;
  }
  const known = consumerTimeoutMs !== undefined;
  const timeout = consumerTimeoutMs ?? DEFAULT_CONSUMER_TIMEOUT_MS;
  const source = known
    ? `consumer_timeout (${timeout} ms)`
    : `consumer_timeout (assumed RabbitMQ's default ${timeout} ms; set broker.consumerTimeoutMs to the server's value)`;
  if (isAtLeast(input.serverVersion, [4, 3]) && input.queueType === 'classic') {
    findings.push({
      level: 'ok',
      message: `RabbitMQ ${input.serverVersion} applies consumer_timeout to quorum queues only`,
    });
    return findings;
  }
  if (known && timeout < CHECK_PERIOD_MS) {
    findings.push({
      level: 'warn',
      message: `consumerTimeoutMs is ${timeout} ms: RabbitMQ checks the timeout about once a minute and does not support values under one minute`,
    });
  }
  if (handlerTimeoutMs === undefined) {
    findings.push({
      level: 'warn',
      message: `handlerTimeoutMs is unknown to the adapter, so it cannot be compared with ${source}; run diagnose() with the consumer config`,
    });
    return findings;
  }
  // A delivery waiting in the adapter for a free handler slot is already unacked: with
  // prefetch above concurrency it may wait for whole handler runs before its own starts.
  const rounds = Math.max(1, Math.ceil(prefetch / concurrency));
  const worstHoldMs = handlerTimeoutMs * rounds;
  if (worstHoldMs >= timeout) {
    const why =
      rounds > 1
        ? `a delivery can stay unacked for ${rounds} handler runs (prefetch ${prefetch} over concurrency ${concurrency}) × handlerTimeoutMs ${handlerTimeoutMs} ms = ${worstHoldMs} ms`
        : `handlerTimeoutMs (${handlerTimeoutMs} ms)`;
    findings.push({
      level: known ? 'error' : 'warn',
      message: `${why} is not below ${source}: the broker would close the channel (or cancel the consumer) while the handler runs and redeliver every message in flight on it; lower handlerTimeoutMs or prefetch, or raise consumer_timeout on the server`,
    });
  } else if (outageHoldMs !== undefined && worstHoldMs + outageHoldMs >= timeout) {
    findings.push({
      level: 'warn',
      message: `handlerTimeoutMs plus outageHoldMs (${worstHoldMs + outageHoldMs} ms) is not below ${source}: during a long store outage held deliveries may be requeued by the broker's timeout rather than released`,
    });
  } else {
    findings.push({ level: 'ok', message: `a delivery is settled well within ${source}` });
  }
  return findings;
}

/**
 * True when `version` (`'3.10.8'`, `'4.3.0-rc.1'`) is at least `[major, minor]`; false
 * when unknown.
 *
 * @example
 * ```ts
 * isAtLeast('3.10.8', [4, 3]); // false
 * ```
 */
export function isAtLeast(version: string | undefined, [major, minor]: readonly [number, number]): boolean {
  const match = /^(\d+)\.(\d+)/.exec(version ?? '');
  if (!match) return false;
  const [got, gotMinor] = [Number(match[1]), Number(match[2])];
  return got > major || (got === major && gotMinor >= minor);
}
