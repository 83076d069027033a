/** Messages and handlers: what a handler receives and what it is. */

import type { PublishOptions } from '../outbox.js';
import type { SqlClient } from './store.js';

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
