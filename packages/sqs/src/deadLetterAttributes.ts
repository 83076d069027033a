import type { MessageAttributeValue, Message as SqsMessage } from '@aws-sdk/client-sqs';
import type { DeadLetterReason } from '@oncely/core';

// What a dead-lettered copy carries: the original attributes, then Oncely's reason, detail and
// source ID while SQS's limits leave room.

/** SQS allows at most 10 message attributes per message. */
export const MAX_MESSAGE_ATTRIBUTES = 10;

/** Dead-letter detail is cut to this length (message attributes count towards the 256 KiB limit). */
const MAX_DETAIL_LENGTH = 1000;

/**
 * Message attributes added to a dead-lettered copy.
 *
 * @example
 * ```ts
 * const reason = dlqMessage.MessageAttributes?.[DEAD_LETTER_ATTRIBUTES.reason]?.StringValue; // 'max-attempts'
 * ```
 */
export const DEAD_LETTER_ATTRIBUTES = {
  reason: 'oncely-dead-letter-reason',
  detail: 'oncely-dead-letter-detail',
  sourceMessageId: 'oncely-source-message-id',
} as const;

/**
 * A FIFO message's own `MessageDeduplicationId`, carried as an attribute by its dead-lettered
 * copy and by the replayed copy: each of those needs a deduplication ID of its own (SQS
 * would silently drop a re-send under the original within 5 minutes), and the consumer
 * reads this one first, so `idStrategy: 'deduplication-id'` sees the original ID again.
 */
export const DEDUPLICATION_ID_ATTRIBUTE = 'oncely-deduplication-id';

/**
 * The dead-lettered copy's attributes: every original attribute (SQS allows 10, so
 * the copy always keeps them all, its `message-id` included, and replays as the same
 * message), then, while there is room, the FIFO `deduplicationId` ({@link DEDUPLICATION_ID_ATTRIBUTE}), under that limit and under `maxMessageBytes` (the
 * dead-letter queue's MaximumMessageSize, body included), the reason, the detail and the
 * source MessageId. An original attribute named like one of Oncely's keeps its value.
 *
 * @example
 * ```ts
 * const attributes = deadLetterAttributes(message, 'max-attempts', 'boom');
 * const reasonKept = DEAD_LETTER_ATTRIBUTES.reason in attributes; // false when the original had 10
 * ```
 */
export function deadLetterAttributes(
  message: SqsMessage,
  reason: DeadLetterReason,
  detail: string,
  maxMessageBytes = Number.POSITIVE_INFINITY,
  deduplicationId?: string,
): Record<string, MessageAttributeValue> {
  const attributes = originalAttributes(message);
  const body = message.Body ?? '';
  const add = (name: string, value: string) => {
    if (name in attributes || Object.keys(attributes).length >= MAX_MESSAGE_ATTRIBUTES) return;
    const candidate = { ...attributes, [name]: { DataType: 'String', StringValue: value } };
    if (messageSize(body, candidate) <= maxMessageBytes) Object.assign(attributes, candidate);
  };
  // The ID first: without it a 'deduplication-id' consumer cannot recognise the message.
  if (deduplicationId !== undefined) add(DEDUPLICATION_ID_ATTRIBUTE, deduplicationId);
  add(DEAD_LETTER_ATTRIBUTES.reason, reason);
  const trimmed = detail.length > MAX_DETAIL_LENGTH ? `${detail.slice(0, MAX_DETAIL_LENGTH - 1)}…` : detail;
  if (trimmed !== '') add(DEAD_LETTER_ATTRIBUTES.detail, trimmed);
  if (message.MessageId) add(DEAD_LETTER_ATTRIBUTES.sourceMessageId, message.MessageId);
  return attributes;
}

/** The message's own attributes, as a SendMessage takes them. */
export function originalAttributes(message: SqsMessage): Record<string, MessageAttributeValue> {
  const attributes: Record<string, MessageAttributeValue> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    attributes[name] = {
      DataType: value.DataType,
      StringValue: value.StringValue,
      BinaryValue: value.BinaryValue,
    };
  }
  return attributes;
}

/**
 * A message's size as SQS counts it against MaximumMessageSize: the body plus, for each
 * attribute, its name, data type and value, in bytes.
 */
export function messageSize(body: string, attributes: Record<string, MessageAttributeValue>): number {
  let size = Buffer.byteLength(body, 'utf8');
  for (const [name, value] of Object.entries(attributes)) {
    size += Buffer.byteLength(name, 'utf8') + Buffer.byteLength(value.DataType ?? '', 'utf8');
    if (value.StringValue !== undefined) size += Buffer.byteLength(value.StringValue, 'utf8');
    if (value.BinaryValue !== undefined) size += value.BinaryValue.byteLength;
  }
  return size;
}
