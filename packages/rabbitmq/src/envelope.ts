import type { Envelope } from '@oncely/core';
import type { ConsumeMessage, Message } from 'amqplib';
import type { RabbitMqQueueType, RabbitMqRetryMode } from './options.js';

/**
 * Header carrying, on a retry copy, how many attempts the message had before the copy was
 * published. Classic queues keep no delivery count, and a copy is a new message to a
 * quorum queue (its `x-delivery-count` starts again), so the count travels with the copy.
 *
 * @example
 * ```ts
 * const attemptsBefore = Number(msg.properties.headers?.[ATTEMPTS_HEADER] ?? 0);
 * ```
 */
export const ATTEMPTS_HEADER = 'x-oncely-attempts';
/**
 * Dead letters: why (`missing-id`, `invalid-body`, `max-attempts`).
 *
 * @example
 * ```ts
 * const reason = deadLetter.properties.headers?.[REASON_HEADER]; // 'max-attempts'
 * ```
 */
export const REASON_HEADER = 'x-oncely-dead-letter-reason';
/** Dead letters: a human-readable detail (the last error, truncated). */
export const DETAIL_HEADER = 'x-oncely-dead-letter-detail';
/** Dead letters and retry copies: the work queue the message came from. */
export const SOURCE_QUEUE_HEADER = 'x-oncely-source-queue';
/** Dead letters: when the consumer dead-lettered it (epoch ms), what `oncely dlq list` shows. */
export const DEAD_LETTERED_AT_HEADER = 'x-oncely-dead-lettered-at';
/** Dead letters: the consumer name that dead-lettered it. */
export const CONSUMER_HEADER = 'x-oncely-consumer';
/** Correlates a `basic.return` with its publish, so an unroutable publish is reported. */
export const PUBLISH_ID_HEADER = 'x-oncely-publish-id';

/**
 * Headers the broker owns: they describe one queue's history of one message and must not
 * be copied onto a new message (a copied `x-delivery-count` would be read as this copy's
 * count; `x-death` grows by one entry per pass through a delay queue).
 */
const BROKER_HEADERS = new Set([
  'x-death',
  'x-first-death-exchange',
  'x-first-death-queue',
  'x-first-death-reason',
  'x-last-death-exchange',
  'x-last-death-queue',
  'x-last-death-reason',
  'x-delivery-count',
  'x-acquired-count',
  PUBLISH_ID_HEADER,
]);

/** How the adapter counts attempts for the queue it consumes. */
export interface CountingRules {
  queue: string;
  queueType: RabbitMqQueueType;
  retry: RabbitMqRetryMode;
}

/**
 * Maps an amqplib delivery to the core's envelope: `properties.messageId` as the
 * producer ID, headers as string attributes, and the delivery count where it can be known.
 *
 * Counting (the core uses `deliveryCount` only to tell a first delivery from a possible
 * redelivery; the attempt number is its store counter, which counts failures):
 * - quorum queue: `x-oncely-attempts` (retry copies) + `x-delivery-count` (the broker's
 *   count of failed deliveries of this copy) + 1. Exact, crashes included.
 * - classic queue, first delivery of a message or of a retry copy (`redelivered` false):
 *   `x-oncely-attempts` + 1. Exact.
 * - classic queue, redelivered (a crash, a lost channel, a release, or a `'requeue'`
 *   retry): unknown to the broker, so left to the store's advisory counter. With
 *   `retry: 'requeue'` every delivery on a classic queue uses the store counter, so the
 *   numbers stay on one scale.
 *
 * @example
 * ```ts
 * const envelope = toEnvelope(msg, { queue: 'payments', queueType: 'classic', retry: 'topology' });
 * ```
 */
export function toEnvelope(msg: ConsumeMessage, rules: CountingRules): Envelope {
  const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
  const messageId = msg.properties.messageId;
  return {
    body: msg.content,
    attributes: stringifyHeaders(headers, [PUBLISH_ID_HEADER]),
    producerMessageId: typeof messageId === 'string' && messageId !== '' ? messageId : undefined,
    brokerMessageId: undefined,
    deliveryCount: deliveryCount(msg, rules),
    redelivered: msg.fields.redelivered,
    source: rules.queue,
    raw: msg,
  };
}

/**
 * The delivery count of `msg` under `rules` (see {@link toEnvelope}), or undefined when
 * only the store's advisory counter can tell.
 *
 * @example
 * ```ts
 * deliveryCount(msg, { queue: 'payments', queueType: 'quorum', retry: 'topology' }); // 3 after two failures
 * ```
 */
export function deliveryCount(msg: ConsumeMessage, rules: CountingRules): number | undefined {
  const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
  const before = nonNegativeInteger(headers[ATTEMPTS_HEADER]) ?? 0;
  const brokerCount = nonNegativeInteger(headers['x-delivery-count']);
  if (rules.queueType === 'quorum' || brokerCount !== undefined) return before + (brokerCount ?? 0) + 1;
  if (rules.retry === 'requeue' || msg.fields.redelivered) return undefined;
  return before + 1;
}

/**
 * The attempt number to write on a retry copy or a dead letter: this delivery's count
 * where known; for a redelivered classic-queue message, the lowest count it can have.
 *
 * @example
 * ```ts
 * const attempts = attemptsSoFar(msg, toEnvelope(msg, rules));
 * ```
 */
export function attemptsSoFar(msg: ConsumeMessage, envelope: Envelope): number {
  if (envelope.deliveryCount !== undefined) return envelope.deliveryCount;
  const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
  return (nonNegativeInteger(headers[ATTEMPTS_HEADER]) ?? 0) + (msg.fields.redelivered ? 2 : 1);
}

/**
 * Headers of a copy: the original's, minus the broker-owned ones, plus `extra`.
 *
 * @example
 * ```ts
 * copyHeaders(msg, { [ATTEMPTS_HEADER]: 2 });
 * ```
 */
export function copyHeaders(msg: Message, extra: Record<string, string | number>): Record<string, unknown> {
  const headers: Record<string, unknown> = {};
  for (const [key, value] of Object.entries((msg.properties.headers ?? {}) as Record<string, unknown>)) {
    if (!BROKER_HEADERS.has(key)) headers[key] = value;
  }
  return { ...headers, ...extra };
}

/**
 * AMQP header values as strings: strings as they are, byte arrays as UTF-8, numbers and
 * booleans with `String`, tables and arrays (`x-death`) as JSON. `null` values and the
 * keys in `omit` are left out.
 *
 * @example
 * ```ts
 * stringifyHeaders({ 'x-order-id': 'o-1', n: 5 }); // { 'x-order-id': 'o-1', n: '5' }
 * ```
 */
export function stringifyHeaders(
  headers: Record<string, unknown>,
  omit: readonly string[] = [],
): Record<string, string> {
  const attributes: Record<string, string> = {};
  for (const [key, value] of Object.entries(headers)) {
    if (omit.includes(key)) continue;
    const text = headerText(value);
    if (text !== undefined) attributes[key] = text;
  }
  return attributes;
}

function headerText(value: unknown): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return String(value);
  if (value instanceof Date) return value.toISOString();
  try {
    return JSON.stringify(value, (_key, inner) => (typeof inner === 'bigint' ? String(inner) : inner));
  } catch {
    return String(value);
  }
}

function nonNegativeInteger(value: unknown): number | undefined {
  const number =
    typeof value === 'number'
      ? value
      : typeof value === 'bigint'
        ? Number(value)
        : typeof value === 'string' && /^\d+$/.test(value)
          ? Number(value)
          : Buffer.isBuffer(value) && /^\d+$/.test(value.toString('utf8'))
            ? Number(value.toString('utf8'))
            : undefined;
  return number !== undefined && Number.isSafeInteger(number) && number >= 0 ? number : undefined;
}
