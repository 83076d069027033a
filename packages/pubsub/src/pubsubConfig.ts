import type { PubSub } from '@google-cloud/pubsub';
import { ConfigError } from '@oncely/core';

/** Pub/Sub accepts ack deadlines of at most 600 s (ModifyAckDeadline, Subscription). */
export const MAX_ACK_DEADLINE_SECONDS = 600;
/**
 * The least ack deadline the service takes for a subscription and for a StreamingPull
 * stream (`stream_ack_deadline_seconds`); ModifyAckDeadline alone accepts 0–600 s.
 */
export const MIN_ACK_DEADLINE_SECONDS = 10;

/**
 * The `broker` section of a consumer config for Google Cloud Pub/Sub.
 *
 * @example
 * ```ts
 * const broker: PubSubBrokerConfig = {
 *   type: 'pubsub',
 *   projectId: 'shop-prod',
 *   subscription: 'payments',
 *   deadLetterTopic: 'payments-dead-letters',
 * };
 * ```
 */
export interface PubSubBrokerConfig {
  type: 'pubsub';
  /** Subscription ID (`payments`) or full name (`projects/p/subscriptions/payments`). */
  subscription: string;
  /** @default the client's own resolution, at start (README, "Where the project comes from") */
  projectId?: string;
  /**
   * `host:port` of an emulator (the client's emulator mode: plain-text gRPC, no
   * credentials), or a regional endpoint. @default `PUBSUB_EMULATOR_HOST`, else Google's endpoint
   */
  apiEndpoint?: string;
  /**
   * A client you built yourself (used as is and not closed on close). Exclusive with
   * `projectId` and `apiEndpoint`. @default a new PubSub from `projectId` and `apiEndpoint`
   */
  client?: PubSub;
  /**
   * Lease per delivery and per renewal, in seconds, 10–600. It is also the stream's ack
   * deadline (`stream_ack_deadline_seconds`), which the service accepts from 10 to 600 s
   * only: below 10 every stream would be refused.
   * @default the subscription's `ackDeadlineSeconds`
   */
  ackDeadlineSeconds?: number;
  /** StreamingPull streams; each gets its own `max_outstanding_messages` (see `maxDeferredMessages`). @default 1 */
  maxStreams?: number;
  /**
   * How many messages may wait out a retry backoff (a subscription without a retry
   * policy: the ack deadline is set to the delay) or be parked (no dead-letter topic)
   * without holding back the others. Such messages stay outstanding at the service, so
   * the stream's `max_outstanding_messages` is `concurrency` plus this; the adapter runs
   * `concurrency` at a time and keeps the leases of the others, so up to this many may
   * also be received ahead of a free handler slot. 0 gives the stream just the handler
   * slots: then one deferred message holds one of them back.
   * @default the consumer's concurrency, at least 10
   */
  maxDeferredMessages?: number;
  /**
   * Topic that receives messages Oncely dead-letters (published with the reason as an
   * attribute, then the original is acked). ID or full name.
   * @default the subscription's dead-letter policy topic, if any
   */
  deadLetterTopic?: string;
  /**
   * A pull subscription on the dead-letter topic, through which `oncely dlq` (`DeadLetters`)
   * reads the dead letters (a topic cannot be read). The consumer itself never uses it.
   * Create it with the dead-letter topic, before anything is dead-lettered: a subscription
   * receives only what is published after it exists. No message ordering, no dead-letter
   * policy of its own. ID or full name. @default none: `oncely dlq` refuses without it
   */
  deadLetterSubscription?: string;
  /**
   * How long the lease keeper renews a delivery's ack deadline, from when the delivery is
   * handed to the consumer. At `handlerTimeoutMs` the keeper aborts `ctx.signal` but goes
   * on renewing, so that a handler that stops rolls back and is retried under a lease
   * still held (the retry's backoff applies); at this cap it stops renewing and reports
   * `leaseLost`: the lease lapses within one lease length and the service hands the
   * message out again, so a handler that hangs holds its handler slot, not the message.
   * At least `handlerTimeoutMs`. (Pub/Sub itself sets no total; the client's
   * `maxExtensionTime`, 60 min by default, is its own cap and is not used.)
   * @default handlerTimeoutMs + 60000
   */
  maxExtensionMs?: number;
  /**
   * How long `start()` waits for the service to answer its first call (GetSubscription),
   * retries included, before it fails with `BROKER_UNREACHABLE`. Without it the client
   * retries an unreachable endpoint for its own 60 s budget. @default 15000
   */
  connectTimeoutMs?: number;
}

/** {@link PubSubBrokerConfig} after validation. */
export interface PubSubSettings {
  subscription: string;
  projectId?: string;
  apiEndpoint?: string;
  client?: PubSub;
  ackDeadlineSeconds?: number;
  maxStreams: number;
  maxDeferredMessages?: number;
  deadLetterTopic?: string;
  deadLetterSubscription?: string;
  maxExtensionMs?: number;
  connectTimeoutMs: number;
}

const KNOWN_OPTIONS = new Set([
  'type',
  'subscription',
  'projectId',
  'apiEndpoint',
  'client',
  'ackDeadlineSeconds',
  'maxStreams',
  'maxDeferredMessages',
  'deadLetterTopic',
  'deadLetterSubscription',
  'maxExtensionMs',
  'connectTimeoutMs',
]);

const SUBSCRIPTION_NAME = /^(projects\/[^/]+\/subscriptions\/)?[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$/;
const TOPIC_NAME = /^(projects\/[^/]+\/topics\/)?[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$/;

/**
 * Validates the `broker` section. Throws a `ConfigError` naming the offending field;
 * unknown options are refused so that a typo fails at boot instead of being ignored.
 *
 * @example
 * ```ts
 * const settings = parsePubSubConfig({ type: 'pubsub', subscription: 'payments' });
 * ```
 */
export function parsePubSubConfig(broker: Record<string, unknown>): PubSubSettings {
  if (typeof broker !== 'object' || broker === null) throw new ConfigError('broker', 'must be an object');
  if (broker.type !== 'pubsub')
    throw new ConfigError('broker.type', `must be 'pubsub', got ${show(broker.type)}`);
  for (const field of Object.keys(broker)) {
    if (!KNOWN_OPTIONS.has(field)) {
      throw new ConfigError(
        `broker.${field}`,
        `is not a Pub/Sub option (known: ${[...KNOWN_OPTIONS].join(', ')})`,
      );
    }
  }
  const subscription = broker.subscription;
  if (typeof subscription !== 'string' || !validName(SUBSCRIPTION_NAME, subscription)) {
    throw new ConfigError(
      'broker.subscription',
      `must be a subscription ID or projects/{project}/subscriptions/{id}, got ${show(subscription)}`,
    );
  }
  const deadLetterTopic = broker.deadLetterTopic;
  if (
    deadLetterTopic !== undefined &&
    (typeof deadLetterTopic !== 'string' || !validName(TOPIC_NAME, deadLetterTopic))
  ) {
    throw new ConfigError(
      'broker.deadLetterTopic',
      `must be a topic ID or projects/{project}/topics/{id}, got ${show(deadLetterTopic)}`,
    );
  }
  const deadLetterSubscription = broker.deadLetterSubscription;
  if (
    deadLetterSubscription !== undefined &&
    (typeof deadLetterSubscription !== 'string' || !validName(SUBSCRIPTION_NAME, deadLetterSubscription))
  ) {
    throw new ConfigError(
      'broker.deadLetterSubscription',
      `must be a subscription ID or projects/{project}/subscriptions/{id}, got ${show(deadLetterSubscription)}`,
    );
  }
  for (const field of ['projectId', 'apiEndpoint'] as const) {
    const value = broker[field];
    if (value !== undefined && (typeof value !== 'string' || value === '')) {
      throw new ConfigError(`broker.${field}`, `must be a non-empty string, got ${show(value)}`);
    }
  }
  const client = broker.client;
  if (client !== undefined) {
    if (
      typeof client !== 'object' ||
      client === null ||
      typeof (client as PubSub).subscription !== 'function'
    ) {
      throw new ConfigError('broker.client', 'must be a PubSub from @google-cloud/pubsub');
    }
    for (const field of ['projectId', 'apiEndpoint'] as const) {
      if (broker[field] !== undefined) {
        throw new ConfigError(
          `broker.${field}`,
          'cannot be combined with broker.client; configure the client instead',
        );
      }
    }
  }
  return {
    subscription,
    projectId: broker.projectId as string | undefined,
    apiEndpoint: broker.apiEndpoint as string | undefined,
    client: client as PubSub | undefined,
    ackDeadlineSeconds: integer(
      broker.ackDeadlineSeconds,
      MIN_ACK_DEADLINE_SECONDS,
      MAX_ACK_DEADLINE_SECONDS,
      'broker.ackDeadlineSeconds',
    ),
    maxStreams: integer(broker.maxStreams, 1, 20, 'broker.maxStreams') ?? 1,
    maxDeferredMessages: integer(broker.maxDeferredMessages, 0, 10_000, 'broker.maxDeferredMessages'),
    deadLetterTopic: deadLetterTopic as string | undefined,
    deadLetterSubscription: deadLetterSubscription as string | undefined,
    maxExtensionMs: integer(broker.maxExtensionMs, 1, 7 * 24 * 3_600_000, 'broker.maxExtensionMs'),
    connectTimeoutMs: integer(broker.connectTimeoutMs, 1, 600_000, 'broker.connectTimeoutMs') ?? 15_000,
  };
}

/**
 * `broker.maxExtensionMs` by default is `handlerTimeoutMs` plus this: time for what runs
 * before the handler (the claim, a duplicate waiting on another's marker row) and after
 * it (rollback or commit, the settlement).
 */
const DEFAULT_EXTENSION_GRACE_MS = 60_000;

/**
 * The cap of lease renewal for a consumer whose handlers time out after
 * `handlerTimeoutMs`: `broker.maxExtensionMs`, which may not be below it (the lease would
 * lapse while the handler may still commit), or `handlerTimeoutMs` + 60 s. Throws a
 * `ConfigError` naming `broker.maxExtensionMs`.
 *
 * @example
 * ```ts
 * const capMs = maxExtensionMsFor(parsePubSubConfig(broker), 30_000); // 90_000
 * ```
 */
export function maxExtensionMsFor(settings: PubSubSettings, handlerTimeoutMs: number): number {
  const { maxExtensionMs } = settings;
  if (maxExtensionMs !== undefined && maxExtensionMs < handlerTimeoutMs) {
    throw new ConfigError(
      'broker.maxExtensionMs',
      `must be at least handlerTimeoutMs (${handlerTimeoutMs}), got ${maxExtensionMs}: the lease would lapse while the handler may still commit`,
    );
  }
  return maxExtensionMs ?? handlerTimeoutMs + DEFAULT_EXTENSION_GRACE_MS;
}

/** The ID part must not start with `goog` (reserved by the service). */
function validName(pattern: RegExp, name: string): boolean {
  return pattern.test(name) && !/^goog/i.test(name.split('/').pop()!);
}

function integer(value: unknown, min: number, max: number, field: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${show(value)}`);
  }
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
// so `createConsumer({ broker: { type: 'pubsub', ... } })` is type-checked.
declare module '@oncely/core' {
  interface BrokerOptionsByType {
    pubsub: PubSubBrokerConfig;
  }
}
