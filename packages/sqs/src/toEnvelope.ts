import { createHash } from 'node:crypto';
import type { Message as SqsMessage } from '@aws-sdk/client-sqs';
import type { Envelope } from '@oncely/core';
import { DEDUPLICATION_ID_ATTRIBUTE } from './deadLetterAttributes.js';

/** What {@link toEnvelope} needs to know about the queue. */
export interface EnvelopeContext {
  /** Queue URL: the envelope's `source`. */
  source: string;
  /** The queue is FIFO with ContentBasedDeduplication on. */
  contentBasedDeduplication: boolean;
}

/**
 * Maps an SQS message to the core's envelope:
 *
 * - `body`: the body as a string;
 * - `attributes`: each message attribute's `StringValue` (String and Number types;
 *   Binary attributes are left out);
 * - `brokerMessageId`: SQS `MessageId`; `deduplicationId`: `MessageDeduplicationId`;
 *   `orderingKey`: `MessageGroupId`; `sequence`: `SequenceNumber`;
 * - `deliveryCount`: `ApproximateReceiveCount` (absent if SQS did not return it: the core
 *   then counts attempts in the store).
 *
 * On a queue with content-based deduplication, a `MessageDeduplicationId` that SQS
 * derived from the body (its SHA-256) is **not** passed on as `deduplicationId`: two
 * different orders with the same body would share it, so under the `'deduplication-id'`
 * strategy such a message has no ID and is dead-lettered (`missing-id`) instead of being
 * wrongly skipped. An explicit ID the producer set is passed on.
 *
 * @example
 * ```ts
 * const envelope = toEnvelope(message, { source: queueUrl, contentBasedDeduplication: false });
 * ```
 */
export function toEnvelope(message: SqsMessage, context: EnvelopeContext): Envelope {
  const body = message.Body ?? '';
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    if (value.StringValue !== undefined) attributes[name] = value.StringValue;
  }
  const system = message.Attributes ?? {};
  const receiveCount = Number(system.ApproximateReceiveCount);
  const deliveryCount = Number.isInteger(receiveCount) && receiveCount >= 1 ? receiveCount : undefined;
  let deduplicationId = system.MessageDeduplicationId;
  if (deduplicationId && context.contentBasedDeduplication && deduplicationId === sha256Hex(body)) {
    deduplicationId = undefined;
  }
  // A replayed dead letter: its own deduplication ID is new, the original travels with it.
  const carried = attributes[DEDUPLICATION_ID_ATTRIBUTE];
  if (carried !== undefined && carried !== '') deduplicationId = carried;
  return {
    body,
    attributes,
    brokerMessageId: message.MessageId,
    deduplicationId,
    deliveryCount,
    redelivered: deliveryCount === undefined ? undefined : deliveryCount > 1,
    orderingKey: system.MessageGroupId,
    sequence: system.SequenceNumber,
    source: context.source,
    raw: message,
  };
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
