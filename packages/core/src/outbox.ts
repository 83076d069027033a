import { randomUUID } from 'node:crypto';
import { ConfigError, OncelyError } from './errors.js';
import type { IdempotencyStore, SqlClient } from './types.js';

/**
 * The transactional outbox, the producer half of exactly-once effects: a handler writes
 * the messages it wants to send as rows in its own transaction (`ctx.publish`), and a
 * relay (`createRelay` in `@oncely/postgres`) sends the committed rows afterwards, at
 * least once, each with its stable ID. The next consumer's inbox absorbs the duplicates.
 *
 * Core defines only the contracts: the store writes rows ({@link OutboxStore}), each
 * adapter package exports an {@link OutboxProducer}.
 */

/**
 * Options of `ctx.publish` and {@link publishInTransaction}.
 *
 * @example
 * ```ts
 * await ctx.publish('payments-made', { orderId }, { key: customerId, attributes: { type: 'payment' } });
 * ```
 */
export interface PublishOptions {
  /**
   * The message's stable ID, sent where the receiving consumer's default ID strategy
   * reads it. Publishing the same ID twice writes one row.
   * @default `${consumer}:${messageId}:${n}` in a handler (n counts the handler's
   * publishes, from 1), so a re-run of the handler writes the same IDs; a random UUID in
   * {@link publishInTransaction}
   */
  id?: string;
  /**
   * Ordering key: messages with one key are sent in the order they were written (by
   * writing transaction, then position), and a failing one holds back the later ones.
   * Producers map it to the broker's own key (Kafka key, SQS FIFO group, ordering key).
   * @default none: no order is kept
   */
  key?: string;
  /** String attributes / headers sent with the message. @default {} */
  attributes?: Record<string, string>;
}

/**
 * One row to write, as the store receives it.
 *
 * @example
 * ```ts
 * const row: OutboxWrite = { id: 'order-7:paid', destination: 'payments-made', body: { orderId: 7 }, attributes: {} };
 * ```
 */
export interface OutboxWrite {
  id: string;
  destination: string;
  /** Encoded as the relay sends it: a string as UTF-8, bytes as they are, anything else as JSON. */
  body: unknown;
  key?: string;
  attributes: Record<string, string>;
}

/**
 * The optional store capability behind `ctx.publish`: writes outbox rows inside a
 * transaction of the store. `@oncely/postgres` implements it.
 *
 * @example
 * ```ts
 * await store.outbox?.write(tx, { id: 'm-1', destination: 'receipts', body: { orderId: 1 }, attributes: {} });
 * ```
 */
export interface OutboxStore<Tx = SqlClient> {
  /**
   * Writes `message` in `tx`; it commits or rolls back with the rest of `tx`. A row with
   * the same `id` already present is left as it is (the write is idempotent).
   */
  write(tx: Tx, message: OutboxWrite): Promise<void>;
}

/**
 * One outbox row as a producer sends it.
 *
 * @example
 * ```ts
 * const message: OutboxMessage = { id: 'm-1', destination: 'receipts', body: Buffer.from('{}'), attributes: {}, attempt: 1 };
 * ```
 */
export interface OutboxMessage {
  /** The stable ID: the producer puts it where its adapter's default ID strategy reads it. */
  id: string;
  /** Queue, topic or exchange name, as the producer interprets it. */
  destination: string;
  /** The encoded body (a JSON text unless the publisher gave a string or bytes). */
  body: Uint8Array;
  /** Ordering key, when the row has one. */
  key?: string;
  attributes: Record<string, string>;
  /** 1 on the first send of this row, more after failed sends. */
  attempt: number;
}

/**
 * The outcome of sending one message. `permanent` tells the relay no retry can succeed
 * (a missing queue, a message too large): it dead-letters the row at once.
 */
export type OutboxSendResult = { ok: true } | { ok: false; error: unknown; permanent?: boolean };

/**
 * What each adapter package exports for the relay: sends messages and resolves once the
 * broker confirmed each one (or refused it), with one result per message, in order.
 * Messages sharing a `key` arrive in order; the relay never gives a producer a message
 * whose key has an earlier message still unconfirmed.
 *
 * @example
 * ```ts
 * const producer: OutboxProducer = {
 *   async send(messages) {
 *     return Promise.all(messages.map(async (m) => {
 *       try { await broker.publish(m.destination, m.body, { id: m.id }); return { ok: true as const }; }
 *       catch (error) { return { ok: false as const, error }; }
 *     }));
 *   },
 * };
 * ```
 */
export interface OutboxProducer {
  send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]>;
  /** Releases connections the producer owns. */
  close?(): Promise<void>;
}

/** The error a store without the outbox capability raises when asked to publish. */
export class OutboxUnsupportedError extends OncelyError {
  constructor(detail: string) {
    super('OUTBOX_UNSUPPORTED', detail);
  }
}

/**
 * Writes an outbox row in `tx`, a transaction of `store` you opened yourself (an HTTP
 * handler, a script): the message is sent by the relay after `tx` commits, and never if
 * it rolls back. Returns the message's ID.
 *
 * @example
 * ```ts
 * await store.transaction(async (tx) => {
 *   await tx.query('INSERT INTO orders(id, total) VALUES ($1, $2)', [orderId, total]);
 *   await publishInTransaction(store, tx, 'orders-placed', { orderId, total }, { id: `order-${orderId}` });
 * });
 * ```
 */
export async function publishInTransaction<Tx>(
  store: IdempotencyStore<Tx>,
  tx: Tx,
  destination: string,
  body: unknown,
  options: PublishOptions = {},
): Promise<string> {
  const message = toOutboxWrite(destination, body, options, () => randomUUID());
  await outboxOf(store).write(tx, message);
  return message.id;
}

/** The store's outbox capability, or a clear error naming what is missing. */
export function outboxOf<Tx>(store: IdempotencyStore<Tx>): OutboxStore<Tx> {
  const outbox = (store as { outbox?: OutboxStore<Tx> }).outbox;
  if (!outbox || typeof outbox.write !== 'function') {
    throw new OutboxUnsupportedError(
      'this store has no outbox: publishing needs a store that implements OutboxStore (PostgresStore does)',
    );
  }
  return outbox;
}

/** Validates publish arguments into a row; `defaultId` is called only when no `id` was given. */
export function toOutboxWrite(
  destination: string,
  body: unknown,
  options: PublishOptions | undefined,
  defaultId: () => string,
): OutboxWrite {
  if (typeof destination !== 'string' || destination === '') {
    throw new ConfigError('destination', `must be a non-empty string; got ${String(destination)}`);
  }
  if (body === undefined) throw new ConfigError('body', 'is required (use null for an empty JSON body)');
  const { id, key, attributes = {} } = options ?? {};
  if (id !== undefined && (typeof id !== 'string' || id === '')) {
    throw new ConfigError('id', `must be a non-empty string; got ${String(id)}`);
  }
  if (key !== undefined && (typeof key !== 'string' || key === '')) {
    throw new ConfigError('key', `must be a non-empty string; got ${String(key)}`);
  }
  if (typeof attributes !== 'object' || attributes === null) {
    throw new ConfigError('attributes', 'must be an object of strings');
  }
  for (const [name, value] of Object.entries(attributes)) {
    if (typeof value !== 'string') throw new ConfigError(`attributes.${name}`, 'must be a string');
  }
  return {
    id: id ?? defaultId(),
    destination,
    body,
    ...(key !== undefined ? { key } : {}),
    attributes: { ...attributes },
  };
}

/**
 * How an outbox body is stored and sent: bytes as they are, a string as UTF-8, anything
 * else as JSON (what a consumer's default `bodyFormat: 'json'` decodes).
 *
 * @example
 * ```ts
 * encodeOutboxBody({ orderId: 7 }); // the bytes of '{"orderId":7}'
 * ```
 */
export function encodeOutboxBody(body: unknown): Uint8Array {
  if (body instanceof Uint8Array) return body;
  let text: string | undefined;
  try {
    text = typeof body === 'string' ? body : JSON.stringify(body);
  } catch (error) {
    throw new ConfigError('body', 'cannot be encoded as JSON', { cause: error });
  }
  if (text === undefined) throw new ConfigError('body', 'cannot be encoded as JSON');
  return new TextEncoder().encode(text);
}
