/** Adapters: what a broker adapter hands the core (Delivery) and the contract it implements. */

import type { BrokerConfig, ConsumerConfig, IdStrategy, ProcessingMode } from './config.js';
import type { DeadLetterSession } from './deadLetters.js';
import type { Logger } from './handler.js';
import type { IdempotencyStore } from './store.js';

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

/**
 * The backlog of a consumer's dead-letter queue, as its broker reports it: what the
 * gauges `oncely.dead_letters.depth` and `oncely.dead_letters.oldest_age` observe.
 *
 * @example
 * ```ts
 * const backlog: DeadLetterBacklog = { depth: 3, oldestAgeMs: 42_000, queue: 'orders.dlq' };
 * ```
 */
export interface DeadLetterBacklog {
  /**
   * The dead-letter queue counted, as the adapter names it (RabbitMQ: the queue's name;
   * SQS: its URL; memory: the consumer's queue, whose dead-letter list it is): the gauges'
   * `messaging.destination.name`, so consumers of one name on different queues are
   * different series.
   */
  queue: string;
  /** Dead letters the queue holds now (approximate where the broker's count is: SQS). */
  depth: number;
  /**
   * How long ago the oldest of them was dead-lettered, in ms, and 0 when `depth` is 0 (so
   * an exporter that repeats a series' last value does not keep an emptied queue old).
   * Absent where the broker cannot tell cheaply (SQS, RabbitMQ).
   */
  oldestAgeMs?: number;
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
  /**
   * Reads the dead-letter queue's backlog through the adapter's own client (one cheap
   * broker call: no new connection, nothing consumed), for the consumer's dead-letter
   * gauges. Only called between `start()` and `stop()`, at most one call at a time. Resolves
   * undefined when there is nothing to report (no dead-letter queue known); rejects when the
   * broker cannot answer. `signal` aborts when the core stops waiting (its timeout, or `stop()`
   * began): end the broker call then where the client can. Absent where the broker cannot count its
   * dead letters cheaply (Service Bus, Pub/Sub, Kafka).
   */
  deadLetterBacklog?(signal: AbortSignal): Promise<DeadLetterBacklog | undefined>;
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
  /**
   * Opens a pass over the consumer's dead-letter queue (`oncely dlq`, `DeadLetters`):
   * read without consuming, replay to the source, remove.
   */
  openDeadLetters?(config: ConsumerConfig<any, any>): Promise<DeadLetterSession>;
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
