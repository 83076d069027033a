import type { Message as PubSubMessage } from '@google-cloud/pubsub';
import type { Envelope } from '@oncely/core';

/**
 * Maps a Pub/Sub message to the core's envelope:
 *
 * - `body`: the data (a Buffer); `attributes`: the message attributes;
 * - `brokerMessageId`: the service's `messageId` (a publisher retry gets a new one, so
 *   it only catches redeliveries: the default ID strategy is the `message-id` attribute);
 * - `deliveryCount`: `deliveryAttempt`, which the service fills in only on subscriptions
 *   with a dead-letter policy (0 otherwise: the core then counts attempts in the store);
 * - `orderingKey`: the ordering key, when set.
 *
 * @example
 * ```ts
 * const envelope = toEnvelope(message, 'projects/p/subscriptions/payments');
 * ```
 */
export function toEnvelope(message: PubSubMessage, source: string): Envelope {
  const attempt = Number(message.deliveryAttempt ?? 0);
  const deliveryCount = Number.isInteger(attempt) && attempt >= 1 ? attempt : undefined;
  return {
    body: message.data,
    attributes: { ...(message.attributes ?? {}) },
    brokerMessageId: message.id,
    deliveryCount,
    redelivered: deliveryCount === undefined ? undefined : deliveryCount > 1,
    orderingKey: message.orderingKey ? message.orderingKey : undefined,
    source,
    raw: message,
  };
}
