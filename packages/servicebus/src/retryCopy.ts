import { createHash } from 'node:crypto';
import type { ServiceBusReceivedMessage } from '@azure/service-bus';
import type { ServiceBusDelivery } from './ServiceBusDelivery.js';
import { COPY_PROPERTIES } from './toEnvelope.js';

/** The SDK's raw AMQP message type (from @azure/core-amqp, which it does not re-export). */
export type AmqpAnnotatedMessage = ServiceBusReceivedMessage['_rawAmqpMessage'];

/** Service Bus caps a MessageId at 128 characters. */
const MAX_MESSAGE_ID_LENGTH = 128;

/**
 * The body as the SDK encodes it for sending. A received message's raw body is rhea's
 * section object ({ typecode, content }) for data, sequence and value sections; sent as
 * it is, the SDK JSON-encodes that object into a data section and the copy's body is
 * `{"typecode":117,"content":{"type":"Buffer",...}}` instead of the original bytes.
 */
function sectionContent(body: unknown): unknown {
  const section = body as { typecode?: unknown; content?: unknown } | null;
  return section !== null &&
    typeof section === 'object' &&
    typeof section.typecode === 'number' &&
    'content' in section
    ? section.content
    : body;
}

/**
 * The scheduled copy of a failed message: the same body, properties and session, a
 * MessageId of its own (deterministic per attempt: duplicate detection would silently
 * drop a copy reusing the original's inside the window, and drops a re-sent copy of
 * the same attempt), the original's MessageId in `oncely-message-id`, its broker ID
 * (sequence number) in `oncely-broker-id` and the attempts so far in `oncely-attempts`.
 */
export function retryCopy(delivery: ServiceBusDelivery, attempts: number): AmqpAnnotatedMessage {
  const raw = delivery.message._rawAmqpMessage;
  const originalId = delivery.envelope.producerMessageId ?? delivery.envelope.brokerMessageId ?? 'unknown';
  let copyId = `${originalId}|oncely-retry-${attempts}`;
  if (copyId.length > MAX_MESSAGE_ID_LENGTH) {
    copyId = `oncely-retry-${attempts}-${createHash('sha256').update(originalId).digest('hex')}`;
  }
  const annotations: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw.messageAnnotations ?? {})) {
    // Broker-set annotations (sequence number, lock, enqueue time...) belong to the original.
    if (!key.startsWith('x-opt-') || key === 'x-opt-partition-key') annotations[key] = value;
  }
  const properties = { ...(raw.applicationProperties ?? {}) };
  if (delivery.envelope.producerMessageId !== undefined) {
    properties[COPY_PROPERTIES.messageId] = delivery.envelope.producerMessageId;
  }
  // The original's broker ID (its sequence number, or the one its own copy carried):
  // what idStrategy 'broker' reads on the copy, so every copy is the same Oncely message.
  if (delivery.envelope.brokerMessageId !== undefined) {
    properties[COPY_PROPERTIES.brokerId] = delivery.envelope.brokerMessageId;
  }
  properties[COPY_PROPERTIES.attempts] = attempts;
  return {
    body: sectionContent(raw.body),
    bodyType: raw.bodyType,
    header: raw.header ? { ...raw.header, deliveryCount: undefined } : undefined,
    properties: { ...(raw.properties ?? {}), messageId: copyId },
    applicationProperties: properties,
    messageAnnotations: annotations,
  };
}
