import type { ServiceBusReceivedMessage } from '@azure/service-bus';
import type { Envelope } from '@oncely/core';

/**
 * Application properties the adapter writes on the copies it makes (retry copies), so
 * a copy keeps what the original's consumers read.
 *
 * @example
 * ```ts
 * const id = message.applicationProperties?.[COPY_PROPERTIES.messageId] ?? message.messageId;
 * ```
 */
export const COPY_PROPERTIES = {
  /** The original's MessageId: the copy has a MessageId of its own (duplicate detection would drop a reused one). */
  messageId: 'oncely-message-id',
  /**
   * The original's broker ID (sequence number): a copy has a sequence number of its own,
   * and `idStrategy: 'broker'` must still see the original's.
   */
  brokerId: 'oncely-broker-id',
  /** Attempts already made on the original: the copy's attempt count continues from it. */
  attempts: 'oncely-attempts',
} as const;

/**
 * Maps a received Service Bus message to the core's envelope:
 *
 * - `producerMessageId`: `oncely-message-id` (on retry copies) else `messageId` — what
 *   the default `'producer'` ID strategy reads;
 * - `brokerMessageId`: `oncely-broker-id` (on retry copies: the original's) else the
 *   sequence number (unique per entity);
 * - `attributes`: application properties as strings;
 * - `deliveryCount`: `oncely-attempts` + the SDK's `deliveryCount` (failed deliveries of
 *   this copy, 0 on the first) + 1, so 1 on the first delivery;
 * - `orderingKey`: the session ID.
 *
 * @example
 * ```ts
 * const envelope = toEnvelope(message, 'payments');
 * ```
 */
export function toEnvelope(message: ServiceBusReceivedMessage, source: string): Envelope {
  const properties = message.applicationProperties ?? {};
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(properties)) {
    if (value === undefined || value === null) continue;
    attributes[name] = value instanceof Date ? value.toISOString() : String(value);
  }
  const carried = properties[COPY_PROPERTIES.messageId];
  const producerMessageId =
    typeof carried === 'string' && carried !== ''
      ? carried
      : message.messageId === undefined || message.messageId === null
        ? undefined
        : String(message.messageId);
  const carriedBrokerId = properties[COPY_PROPERTIES.brokerId];
  const before = nonNegativeInteger(properties[COPY_PROPERTIES.attempts]) ?? 0;
  const failed = nonNegativeInteger(message.deliveryCount) ?? 0;
  return {
    body: message.body,
    attributes,
    producerMessageId,
    brokerMessageId:
      typeof carriedBrokerId === 'string' && carriedBrokerId !== ''
        ? carriedBrokerId
        : message.sequenceNumber?.toString(),
    deliveryCount: before + failed + 1,
    redelivered: before + failed > 0,
    orderingKey: message.sessionId,
    sequence: message.sequenceNumber?.toString(),
    source,
    raw: message,
  };
}

function nonNegativeInteger(value: unknown): number | undefined {
  const n = typeof value === 'string' ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : undefined;
}
