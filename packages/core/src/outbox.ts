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
   * reads it. Publishing the same message twice under one ID writes one row; another
   * message under an ID already written raises `OutboxIdConflictError`.
   * @default `${consumer}:${messageId}:${n}` in a handler (n counts the handler's
   * publishes, from 1; `:` and `%` in the names escaped as `%3A` and `%25`, see
   * {@link defaultPublishId}), so a re-run of the handler writes the same IDs; a random UUID in
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
  /** Encoded as the relay sends it: a string as UTF-8, bytes (any ArrayBufferView, an ArrayBuffer) as they are, anything else as JSON. */
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
   * the same `id` and the same message already present is left as it is (the write is
   * idempotent); one with the same `id` and another destination, key, body or attributes
   * raises {@link OutboxIdConflictError}.
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

/**
 * One part of a default publish ID: `%` becomes `%25` and `:` becomes `%3A`, nothing
 * else changes. The parts are joined with `:`, so after this a `:` only ever separates
 * parts and no two (consumer, message ID, n) give the same ID (`orders:eu` + `x` and
 * `orders` + `eu:x` once both gave `orders:eu:x:1`). A part without `:` or `%` (the common
 * case) is left as it is, so such IDs are the same as before this encoding: a message
 * redelivered across the upgrade writes the same IDs and is not sent twice.
 */
export function outboxIdPart(part: string): string {
  return part.includes('%') || part.includes(':') ? part.replaceAll('%', '%25').replaceAll(':', '%3A') : part;
}

/**
 * The ID `ctx.publish` gives its `n`-th publish (from 1) of one handler run when no `id`
 * is passed: `consumer:messageId:n`, each name encoded by {@link outboxIdPart}.
 *
 * @example
 * ```ts
 * defaultPublishId('payments', 'm-1', 1); // 'payments:m-1:1'
 * defaultPublishId('orders:eu', 'x', 1); // 'orders%3Aeu:x:1'
 * ```
 */
export function defaultPublishId(consumer: string, messageId: string, n: number): string {
  return `${outboxIdPart(consumer)}:${outboxIdPart(messageId)}:${n}`;
}

/**
 * An outbox write whose ID is already in the outbox for a different message (another
 * destination, key, body or attributes). The write would otherwise be dropped silently:
 * an ID names one message, and the row that has it stays as it is.
 */
export class OutboxIdConflictError extends OncelyError {
  constructor(
    readonly id: string,
    readonly differences: readonly string[],
  ) {
    super(
      'OUTBOX_ID_CONFLICT',
      `outbox ID '${id}' is already taken by a message with another ${differences.join(', ')}: an ID must name one message (publish the same content under it again, or choose another ID)`,
    );
  }
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
  const { id, key, attributes = {} } = options ?? {};
  const fields = {
    destination,
    body,
    ...(key !== undefined ? { key } : {}),
    attributes: isPlainAttributes(attributes) ? { ...attributes } : attributes,
  };
  // Checked before the default ID is taken: a refused publish must not use up a number
  // (a handler that catches the error would otherwise shift its later IDs).
  if (id === undefined) {
    checkOutboxWrite({ id: 'default', ...fields });
    return { id: defaultId(), ...fields };
  }
  const row: OutboxWrite = { id, ...fields };
  checkOutboxWrite(row);
  return row;
}

/**
 * The checks every outbox write passes, `ctx.publish`, {@link publishInTransaction} and a
 * store's own `outbox.write()` alike, so a row that could never be stored or sent is
 * refused with a `ConfigError` before any SQL: non-empty strings for the destination, the
 * ID and the key (when given), no NUL character in them or in the attributes (PostgreSQL
 * text cannot hold one), a body, and attributes as a plain object of strings.
 *
 * @example
 * ```ts
 * checkOutboxWrite({ id: 'm-1', destination: 'receipts', body: {}, attributes: {} });
 * ```
 */
export function checkOutboxWrite(message: OutboxWrite): void {
  if (typeof message !== 'object' || message === null) throw new ConfigError('message', 'must be an object');
  const { id, destination, key, body, attributes } = message;
  text('destination', destination);
  text('id', id);
  if (key !== undefined && key !== null) text('key', key);
  if (body === undefined) throw new ConfigError('body', 'is required (use null for an empty JSON body)');
  if (attributes !== undefined && !isPlainAttributes(attributes)) {
    throw new ConfigError(
      'attributes',
      `must be a plain object of strings; got ${describeValue(attributes)}`,
    );
  }
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (name.includes('\0'))
      throw new ConfigError('attributes', `has a name with a NUL character: ${JSON.stringify(name)}`);
    if (typeof value !== 'string') throw new ConfigError(`attributes.${name}`, 'must be a string');
    if (value.includes('\0')) throw new ConfigError(`attributes.${name}`, 'must not contain a NUL character');
  }
}

function text(field: string, value: unknown): void {
  if (typeof value !== 'string' || value === '') {
    throw new ConfigError(field, `must be a non-empty string; got ${describeValue(value)}`);
  }
  if (value.includes('\0')) {
    throw new ConfigError(
      field,
      `must not contain a NUL character (PostgreSQL text cannot store it); got ${JSON.stringify(value)}`,
    );
  }
}

function isPlainAttributes(value: unknown): value is Record<string, string> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function describeValue(value: unknown): string {
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return JSON.stringify(value);
  return String(value);
}

/**
 * How an outbox body is stored and sent: bytes (a Uint8Array or Buffer, any other
 * ArrayBufferView such as a DataView, an ArrayBuffer) as they are, a string as UTF-8, anything
 * else as JSON (what a consumer's default `bodyFormat: 'json'` decodes).
 *
 * @example
 * ```ts
 * encodeOutboxBody({ orderId: 7 }); // the bytes of '{"orderId":7}'
 * ```
 */
export function encodeOutboxBody(body: unknown): Uint8Array {
  if (body instanceof Uint8Array) return body;
  // Any other binary view (DataView, Int16Array, a Buffer slice) and a bare ArrayBuffer
  // are bytes too, sent as they are; JSON.stringify would turn them into "{}".
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  if (
    body instanceof ArrayBuffer ||
    (typeof SharedArrayBuffer !== 'undefined' && body instanceof SharedArrayBuffer)
  ) {
    return new Uint8Array(body);
  }
  let text: string | undefined;
  try {
    text = typeof body === 'string' ? body : JSON.stringify(body);
  } catch (error) {
    throw new ConfigError('body', 'cannot be encoded as JSON', { cause: error });
  }
  if (text === undefined) throw new ConfigError('body', 'cannot be encoded as JSON');
  return new TextEncoder().encode(text);
}
