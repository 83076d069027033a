/**
 * The contracts between the three parts of Oncely:
 *
 * - the **store** (`@oncely/postgres`) implements {@link IdempotencyStore};
 * - each **adapter** (`@oncely/sqs`, `@oncely/rabbitmq`, ...) implements {@link BrokerAdapter}
 *   and hands the core {@link Delivery} objects;
 * - the **core** owns the state machine (claim → run → commit → ack) and is the only
 *   place that decides when to ack, retry or dead-letter.
 */

import type { OutboxStore, PublishOptions } from './outbox.js';
import type { TelemetryConfig } from './telemetry.js';

// ---------------------------------------------------------------------------------------
// SQL and the store
// ---------------------------------------------------------------------------------------

/** The result of one SQL statement. */
export interface SqlResult<R = Record<string, unknown>> {
  rows: R[];
  rowCount: number | null;
}

/**
 * A connection inside a transaction: what handlers receive as `ctx.tx` with the Postgres
 * store. Compatible with `pg.PoolClient` and PGlite transactions.
 */
export interface SqlClient {
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
}

/** Identifies one message for one consumer: the unique key of the processed marker. */
export interface MessageKey {
  /** Consumer name: the namespace of processed IDs. */
  consumer: string;
  messageId: string;
}

/** How the store classifies an error (by SQLSTATE or socket error code, never by text). */
export type StoreErrorKind =
  /** The database cannot be reached or went away: fail closed, pause, retry later. */
  | 'unavailable'
  /** Serialization failure, deadlock or lock timeout (40001, 40P01, 55P03): retry at once, no attempt counted. */
  | 'transient'
  /** Anything else, including errors raised by the handler's own SQL. */
  | 'other';

/** Outcome of a leased-mode claim. */
export type LeaseClaim =
  | { status: 'acquired'; owner: string; takeover: boolean; lockedUntil: Date }
  /** Held by another owner until `lockedUntil`, expressed on this process's clock (the store converts). */
  | { status: 'busy'; lockedUntil: Date }
  | { status: 'completed'; result: unknown };

/**
 * Offsets kept in the same transaction as the output (`offsets` mode, Kafka).
 */
export interface OffsetStore<Tx = SqlClient> {
  /**
   * The transaction's first statement: advances the stored next offset of
   * `(consumer, topic, partition)` to `offset + 1` only when it is `<= offset`.
   * Returns false when an earlier owner already applied this record (roll back and skip).
   */
  advance(tx: Tx, consumer: string, topic: string, partition: number, offset: string): Promise<boolean>;
  /** Stored next offsets for a topic's partitions. */
  read(consumer: string, topic: string): Promise<Map<number, string>>;
}

/**
 * Payload fingerprints kept on the processed marker, for consumers with
 * `payloadFingerprint` (and `processOnce` callers that pass one). Separate statements
 * from the plain claim, so a consumer without fingerprints pays nothing for them.
 */
export interface FingerprintStore<Tx = SqlClient> {
  /**
   * Like {@link IdempotencyStore.claim}, also storing each inserted marker's fingerprint
   * (`null`: none). `entries` maps message ID to fingerprint.
   */
  claim(tx: Tx, consumer: string, entries: ReadonlyMap<string, string | null>): Promise<ReadonlySet<string>>;
  /**
   * The fingerprints stored on the markers of `messageIds`, read in `tx` when given (else
   * in a short transaction of its own). IDs with no marker or no fingerprint are absent.
   */
  read(consumer: string, messageIds: readonly string[], tx?: Tx): Promise<ReadonlyMap<string, string>>;
  /** Leased mode: {@link IdempotencyStore.completeLease}, also storing the fingerprint. */
  completeLease(key: MessageKey, owner: string, result: unknown, fingerprint: string): Promise<boolean>;
}

/** A duplicate whose payload differs from the one its marker was written for. */
export interface PayloadMismatch {
  /** The fingerprint stored with the marker (the first payload). */
  storedFingerprint: string;
  /** The fingerprint of the payload this delivery carries. */
  fingerprint: string;
}

/**
 * What the core needs from a store. `@oncely/postgres` implements it on `pg` and PGlite.
 * The core runs the state machine with these primitives; the store never decides
 * whether to ack.
 */
export interface IdempotencyStore<Tx = SqlClient> {
  /** Runs `work` in one transaction: commits when it resolves, rolls back when it throws. */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * Inserts processed markers for `messageIds` inside `tx` (`ON CONFLICT DO NOTHING`) and
   * returns the IDs this call inserted. An ID held by another open transaction makes the
   * call wait for it: its commit makes the ID a duplicate, its rollback hands it to us.
   */
  claim(tx: Tx, consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>>;
  /**
   * Deletes markers this transaction claimed for `messageIds` (a batch item whose work
   * failed after the batch's single claim statement): its retry must find no marker.
   */
  unclaim(tx: Tx, consumer: string, messageIds: readonly string[]): Promise<void>;
  /** Runs `work` under a savepoint of `tx`; a throw rolls back to the savepoint and rethrows. */
  savepoint<T>(tx: Tx, work: () => Promise<T>): Promise<T>;
  /**
   * Advisory attempt counter (failed runs, and runs that may crash the process):
   * increments in its own short commit and returns the new count. Never a dedup gate.
   * `run`, a token of the run counted: the same run sent again (its commit landed, its
   * answer was lost) must not be counted twice; without one, every call counts.
   */
  recordAttempt(key: MessageKey, run?: string): Promise<number>;
  /**
   * Takes one count back (a run counted up front was released instead of failing). Never
   * below zero. With `run`: only if that run is the one counted last, and only once.
   */
  forgetAttempt(key: MessageKey, run?: string): Promise<void>;
  /**
   * Deletes the attempt counter of `key`: its message is done (its marker committed), so
   * the count has no further use. Optional: a store without it keeps the row until
   * retention prunes it.
   */
  clearAttempts?(key: MessageKey): Promise<void>;
  /** Leased mode: claim `in_progress` until now + `leaseMs` (database time). */
  acquireLease(key: MessageKey, leaseMs: number): Promise<LeaseClaim>;
  /** Leased mode: extends the claim if `owner` still holds it. */
  renewLease(key: MessageKey, owner: string, leaseMs: number): Promise<boolean>;
  /**
   * Leased mode: marks completed with `result` if `owner` still holds it. True also when
   * `owner` already completed it (a retried completion), keeping the first result.
   */
  completeLease(key: MessageKey, owner: string, result: unknown): Promise<boolean>;
  /** Leased mode: gives the claim up (after a failure) if `owner` still holds it. */
  releaseLease(key: MessageKey, owner: string): Promise<void>;
  /** Classifies an error thrown by any of these methods or by handler SQL. */
  classifyError(error: unknown): StoreErrorKind;
  /** Cheap round trip used to detect that the store is back after an outage. */
  ping(): Promise<void>;
  /** Present on stores that can keep Kafka offsets (`offsets` mode). */
  readonly offsets?: OffsetStore<Tx>;
  /** Present on stores that keep payload fingerprints on markers (`payloadFingerprint`). */
  readonly fingerprints?: FingerprintStore<Tx>;
  /** Present on stores with a transactional outbox (`ctx.publish`). */
  readonly outbox?: OutboxStore<Tx>;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------
// Messages and handlers
// ---------------------------------------------------------------------------------------

/** A delivered message as the handler sees it. */
export interface Message<TBody = unknown> {
  /** The stable ID under the consumer's ID strategy: the same on every delivery. */
  id: string;
  body: TBody;
  /** Message attributes / headers / application properties, as strings. */
  attributes: Readonly<Record<string, string>>;
  /**
   * The attempt this run is: 1, plus the runs of this message that failed or crashed the
   * process. Releases (stop, store outage) do not count, unlike a broker's delivery count.
   */
  deliveryAttempt?: number;
  redelivered?: boolean;
  orderingKey?: string;
  sequence?: string;
  /** Queue, topic or subscription the message came from. */
  source: string;
  /** Broker type, for example `'sqs'`. */
  broker: string;
  /** The broker SDK's own message object. */
  raw: unknown;
}

/**
 * Structured logger; defaults write warnings and errors to stderr. Oncely calls
 * `warn(message, fields)`; a pino logger is taken as it is (its fields-first order is
 * recognised, see `toLogger`).
 *
 * @example
 * ```ts
 * import pino from 'pino';
 * const logger: Logger = pino({ level: 'info' });
 * ```
 */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** What a handler receives besides the message. */
export interface HandlerContext<Tx = SqlClient> {
  /**
   * The store transaction the processed marker is written in. Write business data
   * through it: marker and effect commit together or not at all. Not available in
   * `leased` mode (the handler runs outside any transaction there).
   */
  tx: Tx;
  /**
   * Deterministic key for calls no transaction covers: `${consumer}:${messageId}:${step}`.
   * Send it as the provider's idempotency key.
   */
  idempotencyKey(step: string): string;
  /**
   * Runs `work` under a savepoint of `tx`: if it throws, only its statements are rolled
   * back and the error is rethrown, so the rest of the transaction can still commit.
   * This is the way to expect an SQL error in a handler. Catching a failed `ctx.tx`
   * statement without a savepoint leaves the transaction aborted: PostgreSQL then
   * answers the COMMIT with a rollback, and Oncely treats the attempt as failed.
   * Not available in `leased` mode.
   *
   * @example
   * ```ts
   * await ctx.savepoint(() => ctx.tx.query('INSERT INTO seen(id) VALUES ($1)', [id])).catch((error) => {
   *   if (error.code !== '23505') throw error; // already seen: fine, the rest still commits
   * });
   * ```
   */
  savepoint<T>(work: () => Promise<T>): Promise<T>;
  /**
   * Writes an outgoing message to the store's outbox in `tx`: it is sent by the relay
   * after the commit, and never if the transaction rolls back. The ID defaults to
   * `${consumer}:${messageId}:${n}` (the n-th publish of this run), so a re-run writes the
   * same IDs. Resolves with the ID. Not available in `leased` mode (no transaction).
   *
   * @example
   * ```ts
   * await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [message.body.orderId]);
   * await ctx.publish('payments-made', { orderId: message.body.orderId }, { key: message.body.customerId });
   * ```
   */
  publish(destination: string, body: unknown, options?: PublishOptions): Promise<string>;
  /** Aborts when the lease is lost, the handler timeout passes or shutdown's deadline passes. */
  signal: AbortSignal;
  /** 1 on the first attempt. */
  attempt: number;
  log: Logger;
}

/** The user's handler. Throwing rolls the transaction back; the message is retried. */
export type Handler<TBody = unknown, Tx = SqlClient> = (
  message: Message<TBody>,
  ctx: HandlerContext<Tx>,
) => Promise<unknown>;

/** One message of a batch given to a {@link BatchHandler}, with its own context. */
export interface BatchEntry<TBody = unknown, Tx = SqlClient> {
  message: Message<TBody>;
  /**
   * This message's context: its attempt, signal, log, idempotency keys and outbox
   * publishes. `ctx.tx` is the batch's one transaction (the handler's second argument).
   */
  ctx: HandlerContext<Tx>;
}

/**
 * The user's handler for a whole batch (`batchHandler` with `batch`): called once with
 * the batch's new messages (duplicates already left out), inside the transaction that
 * commits their markers, so their effects can be one multi-row statement. Throwing rolls
 * the batch back; it then runs again with each message alone (`entries` of one), so the
 * one at fault fails alone and is retried.
 */
export type BatchHandler<TBody = unknown, Tx = SqlClient> = (
  entries: readonly BatchEntry<TBody, Tx>[],
  tx: Tx,
) => Promise<void>;

// ---------------------------------------------------------------------------------------
// Adapters
// ---------------------------------------------------------------------------------------

/** Why a message went to the dead-letter destination. */
export type DeadLetterReason = 'missing-id' | 'invalid-body' | 'max-attempts' | 'payload-mismatch';

/**
 * What an adapter extracts from a broker delivery, before the core resolves the ID and
 * parses the body.
 */
export interface Envelope {
  /** Raw payload (Buffer or string), or an already-decoded value. */
  body: unknown;
  attributes: Record<string, string>;
  /** ID the broker assigned (SQS MessageId, Pub/Sub messageId, Kafka topic/partition/offset). */
  brokerMessageId?: string;
  /** ID the producer set in the broker's own field (Service Bus messageId, RabbitMQ properties.messageId). */
  producerMessageId?: string;
  /** SQS FIFO MessageDeduplicationId, when present. */
  deduplicationId?: string;
  /** Delivery count kept by the broker (1 = first delivery); absent where the broker keeps none. */
  deliveryCount?: number;
  redelivered?: boolean;
  orderingKey?: string;
  sequence?: string;
  /** Queue / topic / subscription name. */
  source: string;
  /** Position in an ordered log (Kafka): what `offsets` mode advances. */
  offset?: { topic: string; partition: number; offset: string };
  raw: unknown;
}

/** What the core knows when it settles, for adapters that record it on the broker. */
export interface SettlementInfo {
  /** The attempt that was just made (1-based); absent when the message had no ID. */
  attempt?: number;
}

/**
 * One delivery of one message, with its settlement operations. The core calls exactly
 * one of `ack`, `retryLater`, `deadLetter` or `release`, after the store has committed
 * (or after it decided nothing must commit).
 */
export interface Delivery {
  readonly envelope: Envelope;
  /** When the broker lease runs out, in epoch ms, if the broker tells. */
  readonly leaseExpiresAt?: number;
  /**
   * When the broker handed the message out, in epoch ms, if earlier than its dispatch
   * (an adapter that held it, e.g. behind its FIFO group). Caps such as SQS's 12 hours
   * count from here. @default the dispatch time
   */
  readonly receivedAt?: number;
  /**
   * Aborts when the adapter knows the delivery can no longer be settled (RabbitMQ: its
   * channel closed and the broker requeued it). The lease keeper turns it into
   * `ctx.signal` aborting with `LeaseLostError`, without polling.
   */
  readonly lost?: AbortSignal;
  /** Settles the message as done. May fail after a commit: the core logs and counts it. */
  ack(): Promise<void>;
  /**
   * Makes the broker deliver it again, after `delayMs` where the broker can delay.
   * `attempt` is the attempt that just failed, for brokers whose retry copies carry it.
   */
  retryLater(delayMs: number, info?: SettlementInfo): Promise<void>;
  /** Sends it to the dead-letter destination with the reason, then settles the original. */
  deadLetter(reason: DeadLetterReason, detail: string, info?: SettlementInfo): Promise<void>;
  /** Gives it back at once without it counting as a failure where the broker allows (stop, outage). */
  release(): Promise<void>;
  /**
   * Extends the lease to `ms` from now. Rejects with `LeaseLostError` when the lease is
   * gone. Absent when the broker has no renewable lease.
   */
  extendLease?(ms: number): Promise<void>;
  /**
   * Called when the delivery joins a batch (the consumer's `batch` option) that may wait
   * for more messages, up to `batch.maxWaitMs`, before it runs and the delivery is
   * settled. An adapter that holds settlements back to send them together should not
   * wait for this one: under broker flow control the messages its batch waits for come
   * only after the held acks (Pub/Sub).
   */
  awaitingBatch?(): void;
}

/** Lease facts an adapter declares so the core's lease keeper can renew in time. */
export interface AdapterLease {
  /** How far each renewal pushes the lease (for example the SQS visibility timeout). */
  extendByMs: number;
  /** Hard cap measured from receipt (SQS 12 h, Pub/Sub maxExtensionTime); the keeper stops there. */
  maxTotalMs?: number;
}

/** The core side an adapter talks to. */
export interface AdapterRuntime {
  readonly consumerName: string;
  readonly concurrency: number;
  /**
   * Resolves with the number of free handler slots (≥ 1) once the consumer takes work,
   * waiting while it is full or paused (store outage). Resolves 0 once stopping: the
   * receive loop must then end.
   */
  whenReady(): Promise<number>;
  /** Hands a delivery to the pipeline; resolves once it has been settled. Never rejects. */
  dispatch(delivery: Delivery): Promise<void>;
  /**
   * With the consumer's `batch` option: its size, the most deliveries `dispatchInOrder`
   * runs in one transaction. Undefined without it.
   */
  readonly batchSize?: number;
  /**
   * Hands deliveries that must take effect in this order (one Kafka partition's records,
   * by offset) to the pipeline as one batch: one transaction for all of them. When one
   * fails, those after it are released (nothing of them commits ahead of its retry).
   * Resolves once every one has been settled. Never rejects.
   */
  dispatchInOrder?(deliveries: readonly Delivery[]): Promise<void>;
  /** Aborts when `stop()` is called: stop fetching. */
  readonly stopping: AbortSignal;
  /** Reports a broker-side failure the adapter recovered from (reconnects and the like). */
  reportError(error: unknown, context: string): void;
  readonly log: Logger;
  /** The consumer's store, for adapters that keep offsets in it (Kafka `offsets` mode). */
  readonly store: IdempotencyStore<any>;
  readonly mode: ProcessingMode;
}

/**
 * A broker adapter: a receive loop plus settlement. It never decides when to ack.
 *
 * Push brokers (RabbitMQ, Kafka) set their prefetch to `runtime.concurrency` and call
 * `dispatch`; pull brokers (SQS) loop on `whenReady()` and fetch at most that many.
 */
export interface BrokerAdapter {
  readonly type: string;
  /** Where the adapter connects (a URL, brokers, a queue URL), for error messages; secrets are redacted. */
  readonly address?: string;
  /** Present when deliveries have a renewable lease. */
  readonly lease?: AdapterLease;
  /** ID strategy used when the consumer config names none. */
  readonly defaultIdStrategy: IdStrategy;
  start(runtime: AdapterRuntime): Promise<void>;
  /** Stop fetching (store outage). Push adapters cancel or pause consumption; pull adapters may rely on `whenReady()`. */
  pause?(): Promise<void>;
  resume?(): Promise<void>;
  /** Stop fetching and release prefetched deliveries that were never dispatched. */
  stop(): Promise<void>;
  /** Close connections; called after in-flight deliveries were settled. */
  close(): Promise<void>;
}

/** Consumer settings an adapter may check against the broker at start (ID strategy, limits). */
export interface AdapterOptions {
  consumerName: string;
  log: Logger;
  /** The consumer's configured ID strategy, if any (the adapter's default applies otherwise). */
  idStrategy?: IdStrategy;
  /** The consumer's `maxAttempts`: broker-side delivery limits must sit above it. */
  maxAttempts?: number;
  /** The consumer's `handlerTimeoutMs`: broker-side timeouts must sit above it. */
  handlerTimeoutMs?: number;
  /** The consumer's `outageHoldMs`: how long a delivery may be held while the store is down. */
  outageHoldMs?: number;
}

/** What each adapter package exports so `createConsumer` can load it by `broker.type`. */
export interface AdapterModule {
  createAdapter(broker: BrokerConfig, options: AdapterOptions): BrokerAdapter;
  /**
   * The copies of one message the broker's dead-letter queue holds, read without
   * consuming them (`oncely inspect`). Only adapters whose broker can peek offer it.
   */
  findDeadLetters?(config: ConsumerConfig<any, any>, messageId: string): Promise<DeadLetterCopy[]>;
  diagnose?(config: ConsumerConfig): Promise<DiagnoseReport>;
}

/** One finding of `diagnose()`. */
export interface DiagnoseFinding {
  level: 'ok' | 'warn' | 'error';
  message: string;
}

/** One copy of a message in a dead-letter queue, as `findDeadLetters` reports it. */
export interface DeadLetterCopy {
  /** Why it was dead-lettered (`max-attempts`, `missing-id`, `invalid-body`, or the broker's own). */
  reason?: string;
  description?: string;
  /** When it was first enqueued. */
  enqueuedAt?: Date;
  deliveryCount?: number;
}

/** What an adapter's `diagnose()` found (`oncely doctor` prints it). */
export interface DiagnoseReport {
  broker: string;
  findings: DiagnoseFinding[];
}

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/** Payload of every consumer event. */
export interface ConsumerEvent {
  consumer: string;
  /** Absent when the message had no ID. */
  messageId?: string;
  /** Attempt number, where known. */
  attempt?: number;
  /** Handler duration (processed / failed). */
  durationMs?: number;
  /** Retry delay (retried). */
  delayMs?: number;
  /** Dead-letter reason (deadLettered). */
  reason?: DeadLetterReason;
  /** The two fingerprints (payloadMismatch, and the deadLettered that follows it). */
  payloadMismatch?: PayloadMismatch;
  error?: unknown;
}

/** Event names a consumer emits. */
export type ConsumerEventName =
  | 'received'
  | 'processed'
  | 'duplicate'
  /** A duplicate ID whose payload fingerprint differs from the stored one. */
  | 'payloadMismatch'
  | 'failed'
  | 'retried'
  | 'deadLettered'
  | 'leaseRenewed'
  | 'leaseLost'
  | 'ackFailed'
  | 'takeover'
  | 'storeUnavailable'
  | 'storeRecovered'
  | 'released';
