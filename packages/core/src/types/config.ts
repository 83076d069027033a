/** Configuration: the consumer's options. */

import type { TelemetryConfig } from '../telemetry.js';
import type { Envelope } from './adapter.js';
import type { BatchHandler, Handler, Logger, Message } from './handler.js';
import type { IdempotencyStore, SqlClient } from './store.js';

/** The broker types `createConsumer` can load an adapter package for. */
export type BrokerType = 'memory' | 'sqs' | 'servicebus' | 'pubsub' | 'rabbitmq' | 'kafka';

/** The `broker` section: `type` plus the adapter's own options. */
export interface BrokerConfig {
  type: BrokerType | (string & {});
  [option: string]: unknown;
}

/**
 * The typed `broker` sections by `type`, filled by declaration merging: each adapter
 * package (`@oncely/sqs`, `@oncely/rabbitmq`, ...) adds its own entry, so `broker` in a
 * {@link ConsumerConfig} is the union of the adapters your program's types import, and
 * a misspelled option fails to compile. While no adapter is imported it stays the loose
 * {@link BrokerConfig}.
 *
 * @example
 * ```ts
 * import type {} from '@oncely/rabbitmq'; // brings RabbitMQ's entry into this program
 * await createConsumer({ name: 'payments', broker: { type: 'rabbitmq', url, queu: 'payments' }, store, handler });
 * //                                                                       ~~~~ does not compile
 * ```
 */
// biome-ignore lint/suspicious/noEmptyInterface: adapter packages fill it by declaration merging
export interface BrokerOptionsByType {}

/**
 * The `broker` field of a {@link ConsumerConfig}: the union of the adapters' sections in
 * {@link BrokerOptionsByType}, or the loose {@link BrokerConfig} while it is empty.
 *
 * @example
 * ```ts
 * const broker: TypedBrokerConfig = { type: 'sqs', queueUrl }; // with @oncely/sqs's types imported
 * ```
 */
export type TypedBrokerConfig = [keyof BrokerOptionsByType] extends [never]
  ? BrokerConfig
  : BrokerOptionsByType[keyof BrokerOptionsByType];

/**
 * How the stable message ID is found.
 *
 * - `{ attribute: 'message-id' }`: a producer-set attribute/header (recommended).
 * - `'producer'`: the broker's producer-set ID field (Service Bus `messageId`, RabbitMQ `properties.messageId`).
 * - `'broker'`: the broker-assigned ID. Catches redeliveries only, not producer retries.
 * - `'deduplication-id'`: SQS FIFO `MessageDeduplicationId` (unique for 5 minutes only).
 * - `'content-hash'`: SHA-256 of the body. Dangerous: two identical orders become one.
 * - a function of the envelope, returning `undefined` when the message has no ID.
 */
export type IdStrategy =
  | { attribute: string }
  | 'producer'
  | 'broker'
  | 'deduplication-id'
  | 'content-hash'
  | ((envelope: Envelope) => string | undefined);

/** How the body is decoded before the handler sees it. A decode failure dead-letters with `invalid-body`. */
export type BodyFormat = 'json' | 'text' | 'buffer' | ((raw: unknown) => unknown);

/**
 * How a message's effect is made once: `'transactional'` (marker and effect in one
 * transaction), `'leased'` (a claim with a deadline, for work that cannot sit in one
 * transaction) or `'offsets'` (Kafka: the next offset in the output's transaction).
 */
export type ProcessingMode = 'transactional' | 'leased' | 'offsets';

/**
 * What a payload fingerprint covers (`payloadFingerprint`).
 *
 * - `true`: the body as the broker delivered it (bytes; an already-decoded value as JSON
 *   with sorted keys).
 * - `{ attributes: [...] }`: the body and the named attributes (an absent attribute
 *   differs from an empty one).
 * - a function of the decoded message returning a string: yours (hashed before it is
 *   stored). A throw counts as a failed attempt.
 */
export type PayloadFingerprintOption<TBody = unknown> =
  | boolean
  | { attributes: readonly string[] }
  | ((message: Message<TBody>) => string);

/**
 * Delay before a failed message runs again: `initialMs × multiplier^(attempt-1)`, at
 * most `maxMs`, plus jitter.
 *
 * @example
 * ```ts
 * const backoff: Partial<BackoffConfig> = { initialMs: 500, maxMs: 30_000 };
 * ```
 */
export interface BackoffConfig {
  /** @default 1000 */
  initialMs: number;
  /** @default 60000 */
  maxMs: number;
  /** Growth per attempt. @default 2 */
  multiplier?: number;
  /** Extra random delay, as a share of the delay (never below the delay itself). @default 0.2 */
  jitter?: number;
}

/**
 * What `createConsumer` takes: the consumer's name, the broker section, the store, the
 * handler, and optional settings (each with its `@default`). `TBody` is the decoded
 * body's type.
 *
 * @example
 * ```ts
 * const config: ConsumerConfig<{ orderId: string }> = {
 *   name: 'payments',
 *   broker: { type: 'memory', queue: 'payments' },
 *   store,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [message.body.orderId]);
 *   },
 * };
 * ```
 */
export interface ConsumerConfig<TBody = unknown, Tx = SqlClient> {
  /** Namespace of the processed IDs. Two consumers with one name share dedup state. */
  name: string;
  /** `{ type, ...the adapter's options }`; typed per adapter, see {@link BrokerOptionsByType}. */
  broker: TypedBrokerConfig;
  store: IdempotencyStore<Tx>;
  /** Runs once per message, in the transaction of its marker. Give this or `batchHandler`. */
  handler?: Handler<TBody, Tx>;
  /**
   * With `batch`, instead of `handler`: one call per batch with its new messages, in the
   * transaction of their markers. For effects that can be one statement for the whole
   * batch (`INSERT ... SELECT * FROM unnest($1::text[], ...)`): a batch then costs about
   * four round trips whatever its size, where `handler` pays one per message per
   * statement. If it throws, the batch rolls back and runs again with each message alone
   * (a batch of one), so it must accept any number of entries, and calls outside the
   * transaction need `ctx.idempotencyKey`s, as for any retry. See `processBatchTogether`.
   *
   * @example
   * ```ts
   * batch: { size: 32 },
   * batchHandler: async (entries, tx) => {
   *   await tx.query('INSERT INTO payments(order_id, amount) SELECT * FROM unnest($1::text[], $2::int[])', [
   *     entries.map((e) => e.message.body.orderId),
   *     entries.map((e) => e.message.body.amount),
   *   ]);
   * },
   * ```
   */
  batchHandler?: BatchHandler<TBody, Tx>;
  /** Handlers in flight at once. @default 1 */
  concurrency?: number;
  /** @default 'transactional' */
  mode?: ProcessingMode;
  /** @default the adapter's own default */
  idStrategy?: IdStrategy;
  /** @default 'json' */
  bodyFormat?: BodyFormat;
  /** Attempts before the message is dead-lettered with reason `max-attempts`. @default 5 */
  maxAttempts?: number;
  /** Delay before a failed message is retried. @default { initialMs: 1000, maxMs: 60000 } */
  backoff?: Partial<BackoffConfig>;
  /** The handler's time budget; `ctx.signal` aborts after it and the transaction rolls back. @default 30000 */
  handlerTimeoutMs?: number;
  /** Renew broker leases while a message is held. Off only for tests of lease loss. @default true */
  leaseRenewal?: boolean;
  /** `leased` mode: how long a DB claim lives before another consumer may take over; renewed while held. @default 30000 */
  leaseMs?: number;
  /**
   * Store outage: how long in-flight deliveries are held (lease renewed) waiting for the
   * store before they are released to the broker. @default 60000
   */
  outageHoldMs?: number;
  /** `stop()` waits this long for in-flight handlers before aborting their signals. @default 30000 */
  stopTimeoutMs?: number;
  /**
   * After `stopTimeoutMs` aborted the handlers still running, `stop()` waits up to this
   * long more for their deliveries to settle (the rollback, the take-back of the run's
   * attempt count, the broker release) before it closes the adapter and resolves. Not
   * shortened by a short `stopTimeoutMs`: a release cut short leaves its message
   * invisible until its lease lapses. A delivery still unsettled then is logged with its
   * message ID and counted (`ackFailed`); the broker redelivers it after its lease.
   * @default 5000
   */
  stopGraceMs?: number;
  /**
   * The fast path: up to `size` messages in flight are claimed in one statement and run
   * in one transaction, all settled after the one commit. If a handler throws, the batch
   * runs again with each handler under its own savepoint (the failing one rolls back
   * alone and is retried; see `processBatchOnce`). A batch runs when full or
   * `maxWaitMs` (default 20) after its first message. `size` must not exceed
   * `concurrency`; `transactional` mode only. Handlers of a batch run one after another;
   * `batchHandler` takes the whole batch in one call instead.
   */
  batch?: { size: number; maxWaitMs?: number };
  /**
   * Stores a fingerprint of the payload with the processed marker. A later delivery with
   * the same ID and a different fingerprint emits `payloadMismatch` and follows
   * `onPayloadMismatch`. Markers written without a fingerprint never mismatch.
   * `transactional` and `leased` modes; the store must keep fingerprints.
   * @default false
   */
  payloadFingerprint?: PayloadFingerprintOption<TBody>;
  /**
   * What a payload mismatch does: `'skip'` acks it as a duplicate (and reports it);
   * `'dead-letter'` dead-letters it with reason `payload-mismatch`.
   * @default 'skip'
   */
  onPayloadMismatch?: 'skip' | 'dead-letter';
  logger?: Logger;
  /**
   * OpenTelemetry: a `process` span per delivery (a child of the producer's `traceparent`)
   * and the `oncely.*` counters. @default the providers registered with `@opentelemetry/api`
   * (no-ops without an SDK)
   */
  telemetry?: TelemetryConfig;
}
