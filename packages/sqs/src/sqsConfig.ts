import type { SQSClient, SQSClientConfig } from '@aws-sdk/client-sqs';
import { ConfigError } from '@oncely/core';

/** SQS allows a visibility timeout of at most 12 hours (43,200 s). */
export const MAX_VISIBILITY_MS = 43_200_000;

/** Pause after an empty short poll (`waitTimeSeconds: 0`) when `pollingWaitTimeMs` is not set. */
const DEFAULT_SHORT_POLL_PAUSE_MS = 1000;
const MAX_POLLING_WAIT_MS = 3_600_000;

/**
 * The `broker` section of a consumer config for Amazon SQS.
 *
 * @example
 * ```ts
 * const broker: SqsBrokerConfig = {
 *   type: 'sqs',
 *   queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/payments',
 *   deadLetterQueueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/payments-dlq',
 * };
 * ```
 */
export interface SqsBrokerConfig {
  type: 'sqs';
  /** URL of the queue to consume. */
  queueUrl: string;
  /**
   * A client you built yourself (it is used as is and not destroyed on close). Its
   * request timeout, if any, must exceed `waitTimeSeconds`.
   * @default a new SQSClient from `endpoint`, `region` and `credentials`
   */
  client?: SQSClient;
  /** Custom endpoint (LocalStack, ElasticMQ, fauxqs). @default the AWS endpoint for the region */
  endpoint?: string;
  /** @default the region in `queueUrl` (`sqs.<region>.…`), else the SDK's own resolution (AWS_REGION) */
  region?: string;
  /** @default the SDK's default credential chain */
  credentials?: SQSClientConfig['credentials'];
  /**
   * Visibility timeout asked for on every receive, and how far each heartbeat pushes it.
   * Rounded up to whole seconds; 1000 to 43200000.
   * @default the queue's own VisibilityTimeout attribute
   */
  visibilityTimeoutMs?: number;
  /**
   * How often a held message's visibility is renewed (ChangeMessageVisibility, which
   * counts from the call), 100 up to below the visibility timeout. Each renewal sets the
   * visibility to `visibilityTimeoutMs` again (or to twice this interval, if longer).
   * @default half the visibility timeout
   */
  heartbeatIntervalMs?: number;
  /** Long-poll wait per ReceiveMessage call, 0 to 20. @default 20 */
  waitTimeSeconds?: number;
  /**
   * Pause after a ReceiveMessage call that returned nothing, before the next one
   * (sqs-consumer's option of the same name). 0 to 3600000. Without it, short polling
   * (`waitTimeSeconds: 0`) on an empty queue would call SQS in a tight loop.
   * @default 1000 when `waitTimeSeconds` is 0, else 0 (the long poll already waited)
   */
  pollingWaitTimeMs?: number;
  /**
   * Most messages per ReceiveMessage call, 1 to 10 (also bounded by free handler slots).
   * On a FIFO queue the default is 1: SQS can return several messages of one group in
   * one receive, and when the first of them is retried the others cannot be held (SQS
   * blocks the group while any of its messages is in flight, so the retried one would
   * not come back): they are released and received again, one more
   * `ApproximateReceiveCount` each time. Set it higher for throughput and accept that.
   * @default 10 on a standard queue, 1 on a FIFO queue
   */
  maxMessages?: number;
  /**
   * Message attributes each ReceiveMessage asks for (SQS `MessageAttributeNames`: names,
   * `prefix.*`, or `All`). The ID strategy's attribute (`message-id` by default) is always
   * added. 1 to 10 names (SQS allows 10 attributes per message), each up to 256 characters.
   * @default ['All']
   */
  messageAttributeNames?: string[];
  /**
   * Pause after a ReceiveMessage refused for credentials (an expired token, a rotated key,
   * HTTP 403) before polling again, 0 to 3600000 (sqs-consumer's
   * `authenticationErrorTimeout`). Other receive failures back off from 200 ms to 5 s.
   * @default 10000
   */
  authErrorBackoffMs?: number;
  /**
   * What `stop()` does with a long poll in progress. `false`: it is left to answer (at
   * most `waitTimeSeconds`) and what it returns is released at once (visibility 0).
   * `true`: it is aborted at once; a message SQS hands to the abandoned request stays
   * invisible for a whole visibility timeout (the server does not notice the closed
   * connection). @default false
   */
  abortPollOnStop?: boolean;
  /**
   * Queue that receives dead-lettered messages (explicit send with the reason as a
   * message attribute, then delete). @default the target of the queue's RedrivePolicy, if any
   */
  deadLetterQueueUrl?: string;
}

/** {@link SqsBrokerConfig} after validation, with defaults filled in. */
export interface SqsSettings {
  queueUrl: string;
  client?: SQSClient;
  endpoint?: string;
  region?: string;
  credentials?: SQSClientConfig['credentials'];
  visibilityTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  waitTimeSeconds: number;
  pollingWaitTimeMs: number;
  abortPollOnStop: boolean;
  messageAttributeNames: string[];
  authErrorBackoffMs: number;
  /** Undefined: the default for the queue's type, decided at start. */
  maxMessages?: number;
  deadLetterQueueUrl?: string;
}

const KNOWN_OPTIONS = new Set([
  'type',
  'queueUrl',
  'client',
  'endpoint',
  'region',
  'credentials',
  'visibilityTimeoutMs',
  'heartbeatIntervalMs',
  'waitTimeSeconds',
  'pollingWaitTimeMs',
  'abortPollOnStop',
  'messageAttributeNames',
  'authErrorBackoffMs',
  'maxMessages',
  'deadLetterQueueUrl',
]);

/**
 * Validates the `broker` section and fills in defaults. Throws a `ConfigError` naming the
 * offending field (`broker.queueUrl`, ...). Unknown options are refused so that a typo
 * (`queueURL`) fails at boot instead of being ignored.
 *
 * @example
 * ```ts
 * const settings = parseSqsConfig({ type: 'sqs', queueUrl, waitTimeSeconds: 5 });
 * ```
 */
export function parseSqsConfig(broker: Record<string, unknown>): SqsSettings {
  if (typeof broker !== 'object' || broker === null) throw new ConfigError('broker', 'must be an object');
  if (broker.type !== 'sqs') throw new ConfigError('broker.type', `must be 'sqs', got ${show(broker.type)}`);
  for (const field of Object.keys(broker)) {
    if (!KNOWN_OPTIONS.has(field)) {
      throw new ConfigError(
        `broker.${field}`,
        `is not an SQS option (known: ${[...KNOWN_OPTIONS].join(', ')})`,
      );
    }
  }
  const queueUrl = url(broker.queueUrl, 'broker.queueUrl', true)!;
  const deadLetterQueueUrl = url(broker.deadLetterQueueUrl, 'broker.deadLetterQueueUrl', false);
  if (deadLetterQueueUrl === queueUrl) {
    throw new ConfigError('broker.deadLetterQueueUrl', 'must differ from broker.queueUrl');
  }
  const endpoint = url(broker.endpoint, 'broker.endpoint', false);
  const region = broker.region;
  if (region !== undefined && (typeof region !== 'string' || !/^[a-z0-9-]+$/.test(region))) {
    throw new ConfigError(
      'broker.region',
      `must be an AWS region name such as 'eu-west-1', got ${show(region)}`,
    );
  }
  const client = broker.client;
  if (
    client !== undefined &&
    (typeof client !== 'object' || client === null || typeof (client as any).send !== 'function')
  ) {
    throw new ConfigError('broker.client', 'must be an SQSClient from @aws-sdk/client-sqs');
  }
  if (client !== undefined) {
    for (const field of ['endpoint', 'region', 'credentials'] as const) {
      if (broker[field] !== undefined) {
        throw new ConfigError(
          `broker.${field}`,
          'cannot be combined with broker.client; configure the client instead',
        );
      }
    }
  }
  const credentials = broker.credentials;
  if (credentials !== undefined && typeof credentials !== 'function') {
    const c = credentials as Record<string, unknown> | null;
    if (
      typeof c !== 'object' ||
      c === null ||
      typeof c.accessKeyId !== 'string' ||
      typeof c.secretAccessKey !== 'string'
    ) {
      throw new ConfigError(
        'broker.credentials',
        'must be { accessKeyId, secretAccessKey, sessionToken? } or a credential provider',
      );
    }
  }
  const visibilityTimeoutMs = integer(
    broker.visibilityTimeoutMs,
    1000,
    MAX_VISIBILITY_MS,
    'broker.visibilityTimeoutMs',
  );
  const heartbeatIntervalMs = integer(
    broker.heartbeatIntervalMs,
    100,
    MAX_VISIBILITY_MS - 1,
    'broker.heartbeatIntervalMs',
  );
  const roundedVisibility =
    visibilityTimeoutMs === undefined ? undefined : Math.ceil(visibilityTimeoutMs / 1000) * 1000;
  if (heartbeatIntervalMs !== undefined && roundedVisibility !== undefined) {
    checkHeartbeat(heartbeatIntervalMs, roundedVisibility);
  }
  const waitTimeSeconds = integer(broker.waitTimeSeconds, 0, 20, 'broker.waitTimeSeconds') ?? 20;
  const pollingWaitTimeMs =
    integer(broker.pollingWaitTimeMs, 0, MAX_POLLING_WAIT_MS, 'broker.pollingWaitTimeMs') ??
    (waitTimeSeconds === 0 ? DEFAULT_SHORT_POLL_PAUSE_MS : 0);
  const maxMessages = integer(broker.maxMessages, 1, 10, 'broker.maxMessages');
  const abortPollOnStop = boolean(broker.abortPollOnStop, 'broker.abortPollOnStop') ?? false;
  const messageAttributeNames = attributeNames(broker.messageAttributeNames) ?? ['All'];
  const authErrorBackoffMs =
    integer(broker.authErrorBackoffMs, 0, MAX_POLLING_WAIT_MS, 'broker.authErrorBackoffMs') ?? 10_000;
  return {
    queueUrl,
    client: client as SQSClient | undefined,
    endpoint,
    region: (region as string | undefined) ?? (client ? undefined : regionFromQueueUrl(queueUrl)),
    credentials: credentials as SQSClientConfig['credentials'],
    // SQS takes whole seconds; rounding up keeps the declared lease honest.
    visibilityTimeoutMs: roundedVisibility,
    heartbeatIntervalMs,
    waitTimeSeconds,
    pollingWaitTimeMs,
    abortPollOnStop,
    messageAttributeNames,
    authErrorBackoffMs,
    maxMessages,
    deadLetterQueueUrl,
  };
}

/**
 * A renewal must come before the visibility runs out (sqs-consumer's rule too). Checked
 * at parse time when `visibilityTimeoutMs` is given, else at start against the queue's.
 *
 * @example
 * ```ts
 * checkHeartbeat(10_000, 30_000); // fine; checkHeartbeat(30_000, 30_000) throws ConfigError
 * ```
 */
export function checkHeartbeat(heartbeatIntervalMs: number, visibilityMs: number): void {
  if (heartbeatIntervalMs >= visibilityMs) {
    throw new ConfigError(
      'broker.heartbeatIntervalMs',
      `must be below the visibility timeout (${visibilityMs} ms), got ${heartbeatIntervalMs}`,
    );
  }
}

/** `https://sqs.eu-west-1.amazonaws.com/…` → `eu-west-1`; undefined when the host does not say. */
export function regionFromQueueUrl(queueUrl: string): string | undefined {
  const match = /^sqs\.([a-z0-9-]+)\./.exec(new URL(queueUrl).hostname);
  return match?.[1];
}

function url(value: unknown, field: string, required: boolean): string | undefined {
  if (value === undefined && !required) return undefined;
  if (typeof value !== 'string' || value === '')
    throw new ConfigError(field, `must be a URL string, got ${show(value)}`);
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch (error) {
    throw new ConfigError(field, `must be a URL, got ${show(value)}`, { cause: error });
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') {
    throw new ConfigError(field, `must be an http(s) URL, got ${show(value)}`);
  }
  return value;
}

function integer(value: unknown, min: number, max: number, field: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${show(value)}`);
  }
  return value;
}

function attributeNames(value: unknown): string[] | undefined {
  const field = 'broker.messageAttributeNames';
  if (value === undefined) return undefined;
  // From the environment: a comma-separated list.
  const list = typeof value === 'string' ? value.split(',').map((name) => name.trim()) : value;
  if (
    !Array.isArray(list) ||
    list.length < 1 ||
    list.length > 10 ||
    !list.every((name) => typeof name === 'string' && /^[A-Za-z0-9_.-]{1,256}(\.\*)?$|^\.\*$/.test(name))
  ) {
    throw new ConfigError(
      field,
      `must be 1 to 10 attribute names (letters, digits, _ - .; a name may end in .*; or 'All'), got ${show(value)}`,
    );
  }
  return list as string[];
}

function boolean(value: unknown, field: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'boolean') throw new ConfigError(field, `must be true or false, got ${show(value)}`);
  return value;
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

// Adds this adapter's section to the `broker` union of ConsumerConfig (declaration merging),
// so `createConsumer({ broker: { type: 'sqs', ... } })` is type-checked.
declare module '@oncely/core' {
  interface BrokerOptionsByType {
    sqs: SqsBrokerConfig;
  }
}
