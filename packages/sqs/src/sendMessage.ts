import {
  type MessageAttributeValue,
  SendMessageCommand,
  type SendMessageCommandInput,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { ConfigError, traceHeaders } from '@oncely/core';
import { SqsOperationError, sqsErrorCode } from './errors.js';

/** The message attribute the consumer's default ID strategy reads. */
export const MESSAGE_ID_ATTRIBUTE = 'message-id';

/** SQS allows at most 10 message attributes per message. */
const MAX_MESSAGE_ATTRIBUTES = 10;

/**
 * SQS errors that no retry can fix: a bad request, a missing queue, no permission. Every
 * other failure (throttling, a network error, a 5xx, a timeout) is retried.
 */
const PERMANENT_CODES = new Set([
  'InvalidParameterValue',
  'InvalidMessageContents',
  'MissingParameter',
  'QueueDoesNotExist',
  'NonExistentQueue',
  'AccessDenied',
  'AccessDeniedException',
  'InvalidClientTokenId',
  'UnrecognizedClientException',
  'UnsupportedOperation',
  'InvalidAddress',
  'InvalidSecurity',
  'KmsAccessDenied',
  'KmsDisabled',
  'KmsInvalidKeyUsage',
  'KmsInvalidState',
  'KmsNotFound',
  'RequestTooLong',
  'ValidationException',
]);

/**
 * One message for {@link sendMessage}.
 *
 * @example
 * ```ts
 * const message: OutgoingSqsMessage = { queueUrl, id: `order-${order.id}`, body: order, groupId: order.customerId };
 * ```
 */
export interface OutgoingSqsMessage {
  queueUrl: string;
  /**
   * The stable ID of this business message: set once, reused on every retry of the send.
   * It becomes the `message-id` attribute, which the consumer's default ID strategy reads.
   */
  id: string;
  /** A string is sent as is; anything else as JSON (the consumer's default `bodyFormat`). */
  body: unknown;
  /** FIFO `MessageGroupId`: required on a FIFO queue (`.fifo`), refused on a standard one. */
  groupId?: string;
  /**
   * FIFO `MessageDeduplicationId`. @default `id`, so a send retried within SQS's 5-minute
   * window is dropped by SQS itself (beyond that the consumer's marker catches it)
   */
  deduplicationId?: string;
  /** Other string message attributes (at most 9: SQS allows 10 with `message-id`). */
  attributes?: Record<string, string>;
  /** Standard queues only: SQS `DelaySeconds`, 0–900. */
  delaySeconds?: number;
}

/**
 * Retry settings of {@link sendMessage}.
 *
 * @example
 * ```ts
 * await sendMessage(client, message, { attempts: 8, maxBackoffMs: 5000 });
 * ```
 */
export interface SendRetryOptions {
  /** Attempts in all, the first included. @default 5 */
  attempts?: number;
  /** Pause before the second attempt; it doubles each time. @default 100 */
  initialBackoffMs?: number;
  /** @default 3000 */
  maxBackoffMs?: number;
  /** Ends the retries (the pause and the call in progress). */
  signal?: AbortSignal;
}

/**
 * What SQS answered to the send that succeeded.
 *
 * @example
 * ```ts
 * const { messageId, attempts } = await sendMessage(client, message);
 * ```
 */
export interface SentSqsMessage {
  /** SQS `MessageId` (a retried standard-queue send that did reach SQS gives a second one). */
  messageId: string | undefined;
  /** FIFO `SequenceNumber`. */
  sequenceNumber: string | undefined;
  /** Attempts it took. */
  attempts: number;
}

/**
 * Sends one message the way an Oncely consumer needs it: the stable `id` in the
 * `message-id` attribute (and, on a FIFO queue, as the deduplication ID unless you give
 * one), the body as JSON unless it is a string. It waits for SQS's answer and retries a
 * failed send with **the same ID**, so a retry whose first try did reach SQS is a
 * duplicate the consumer skips, never a second business message. Permanent errors (a bad
 * request, a missing queue, no permission) are thrown at once as `SqsOperationError`.
 *
 * The active OpenTelemetry context goes along as `traceparent`/`tracestate` attributes
 * where SQS's limit of 10 leaves room after yours (see docs/observability.md).
 *
 * @example
 * ```ts
 * import { sendMessage } from '@oncely/sqs';
 * await sendMessage(client, {
 *   queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo',
 *   id: `payment-${payment.id}`,
 *   body: { orderId: payment.orderId, amount: payment.amount },
 *   groupId: payment.customerId,
 * });
 * ```
 */
export async function sendMessage(
  client: SQSClient,
  message: OutgoingSqsMessage,
  retry: SendRetryOptions = {},
): Promise<SentSqsMessage> {
  const input = toSendInput(message);
  const attempts = retry.attempts ?? 5;
  if (!Number.isInteger(attempts) || attempts < 1)
    throw new ConfigError('attempts', 'must be an integer ≥ 1');
  let pause = retry.initialBackoffMs ?? 100;
  for (let attempt = 1; ; attempt++) {
    retry.signal?.throwIfAborted();
    try {
      const out = await client.send(new SendMessageCommand(input), { abortSignal: retry.signal });
      return { messageId: out.MessageId, sequenceNumber: out.SequenceNumber, attempts: attempt };
    } catch (error) {
      const code = sqsErrorCode(error) ?? 'Unknown';
      if (retry.signal?.aborted || PERMANENT_CODES.has(code) || attempt >= attempts) {
        throw new SqsOperationError(
          'SendMessage',
          code,
          `${error instanceof Error ? error.message : String(error)} (after ${attempt} attempt(s))`,
          { cause: error },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, retry.maxBackoffMs ?? 3000);
    }
  }
}

/** The SendMessage input for one message (validated). */
export function toSendInput(message: OutgoingSqsMessage): SendMessageCommandInput {
  const { queueUrl, id, body, groupId, deduplicationId, attributes = {}, delaySeconds } = message;
  if (typeof id !== 'string' || id === '') throw new ConfigError('id', 'must be a non-empty string');
  const fifo = queueUrl.endsWith('.fifo');
  if (fifo && !groupId) throw new ConfigError('groupId', `is required on the FIFO queue ${queueUrl}`);
  if (!fifo && (groupId !== undefined || deduplicationId !== undefined)) {
    throw new ConfigError(groupId !== undefined ? 'groupId' : 'deduplicationId', 'is for FIFO queues only');
  }
  if (fifo && delaySeconds !== undefined) {
    throw new ConfigError('delaySeconds', 'is not per message on FIFO queues (set the queue DelaySeconds)');
  }
  const messageAttributes: Record<string, MessageAttributeValue> = {
    [MESSAGE_ID_ATTRIBUTE]: { DataType: 'String', StringValue: id },
  };
  for (const [name, value] of Object.entries(attributes)) {
    if (name === MESSAGE_ID_ATTRIBUTE) {
      throw new ConfigError(`attributes.${name}`, 'is set from id; give the ID as id');
    }
    messageAttributes[name] = { DataType: 'String', StringValue: value };
  }
  if (Object.keys(messageAttributes).length > MAX_MESSAGE_ATTRIBUTES) {
    throw new ConfigError(
      'attributes',
      `SQS allows ${MAX_MESSAGE_ATTRIBUTES} message attributes, message-id included`,
    );
  }
  // The sender's trace context (W3C traceparent, then tracestate), where SQS's limit of 10
  // attributes leaves room: the caller's own attributes come first.
  for (const [name, value] of Object.entries(traceHeaders())) {
    if (name in messageAttributes || Object.keys(messageAttributes).length >= MAX_MESSAGE_ATTRIBUTES)
      continue;
    messageAttributes[name] = { DataType: 'String', StringValue: value };
  }
  return {
    QueueUrl: queueUrl,
    MessageBody: typeof body === 'string' ? body : JSON.stringify(body),
    MessageAttributes: messageAttributes,
    ...(fifo ? { MessageGroupId: groupId, MessageDeduplicationId: deduplicationId ?? id } : {}),
    ...(delaySeconds !== undefined ? { DelaySeconds: delaySeconds } : {}),
  };
}
