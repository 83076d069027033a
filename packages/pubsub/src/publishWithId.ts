import type { Topic } from '@google-cloud/pubsub';
import { traceHeaders } from '@oncely/core';
import { PubSubMessageInvalidError } from './errors.js';

/** The service's limits on one message (https://cloud.google.com/pubsub/quotas#resource_limits). */
const MAX_ATTRIBUTES = 100;
const MAX_ATTRIBUTE_NAME_BYTES = 256;
const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
const MAX_ORDERING_KEY_BYTES = 1024;
/** Data, attribute names and values and the ordering key together. */
const MAX_MESSAGE_BYTES = 10_000_000;

/**
 * A message for {@link publishWithId}.
 *
 * @example
 * ```ts
 * const message: IdentifiedMessage = { id: 'order-42', body: { orderId: 42 }, orderingKey: 'customer-7' };
 * ```
 */
export interface IdentifiedMessage {
  /** The stable ID, sent as the `message-id` attribute (the adapter's default ID strategy). */
  id: string;
  /** JSON-encoded unless a Buffer or a string. */
  body: unknown;
  /** Needs `topic.setPublishOptions({ messageOrdering: true })` on the publisher. */
  orderingKey?: string;
  attributes?: Record<string, string>;
}

/**
 * Options of {@link publishWithId}.
 *
 * @example
 * ```ts
 * const options: PublishWithIdOptions = { attempts: 5, idAttribute: 'message-id' };
 * ```
 */
export interface PublishWithIdOptions {
  /** Tries in all, the client's own retries aside. @default 3 */
  attempts?: number;
  /** @default 'message-id' */
  idAttribute?: string;
  /** Pause before try n (1-based) is `backoffMs * 2^(n-2)`. @default 200 */
  backoffMs?: number;
}

/**
 * Publishes a message with its stable ID in an attribute (and its ordering key), retrying
 * a failed publish with the **same** ID. Pub/Sub gives every publish a new `messageId`,
 * so a retry after a lost response is a second message to the service; the consumer's
 * marker on the `message-id` attribute makes it a duplicate to Oncely. Resolves with the
 * service's `messageId` of the publish that succeeded.
 *
 * With an ordering key, a failed publish pauses the key in the client; it is resumed
 * before the retry (`topic.resumePublishing(key)`), as the ordering samples do.
 *
 * The active OpenTelemetry context goes along as `traceparent`/`tracestate` (see
 * docs/observability.md), so the consumer's span joins the sender's trace.
 *
 * @example
 * ```ts
 * const topic = pubsub.topic('orders', { messageOrdering: true });
 * await publishWithId(topic, { id: 'order-42', body: { orderId: 42 }, orderingKey: 'customer-7' });
 * ```
 */
export async function publishWithId(
  topic: Topic,
  message: IdentifiedMessage,
  options: PublishWithIdOptions = {},
): Promise<string> {
  const attempts = options.attempts ?? 3;
  const backoffMs = options.backoffMs ?? 200;
  const data = Buffer.isBuffer(message.body)
    ? message.body
    : Buffer.from(typeof message.body === 'string' ? message.body : JSON.stringify(message.body));
  // The sender's trace context (W3C traceparent), unless the caller's attributes set one.
  const attributes = {
    ...traceHeaders(),
    ...message.attributes,
    [options.idAttribute ?? 'message-id']: message.id,
  };
  // Refused before publishing: the client batches a topic's messages into one Publish
  // call, and the service refuses the whole call for one such message.
  const invalid = invalidMessage(data, attributes, message.orderingKey ?? '');
  if (invalid) throw new PubSubMessageInvalidError(`message ${message.id}: ${invalid}`);
  for (let attempt = 1; ; attempt++) {
    try {
      return await topic.publishMessage({
        data,
        attributes,
        ...(message.orderingKey ? { orderingKey: message.orderingKey } : {}),
      });
    } catch (error) {
      if (attempt >= attempts) throw error;
      if (message.orderingKey) topic.resumePublishing(message.orderingKey);
      await new Promise((resolve) => setTimeout(resolve, backoffMs * 2 ** (attempt - 1)));
    }
  }
}

/** Why the service would refuse the message (INVALID_ARGUMENT), or undefined. */
function invalidMessage(
  data: Buffer,
  attributes: Record<string, string>,
  orderingKey: string,
): string | undefined {
  const names = Object.keys(attributes);
  if (names.length > MAX_ATTRIBUTES) {
    return `${names.length} attributes (with the ID and trace attributes); Pub/Sub takes at most ${MAX_ATTRIBUTES}`;
  }
  let size = data.length + Buffer.byteLength(orderingKey);
  for (const [name, value] of Object.entries(attributes)) {
    const nameBytes = Buffer.byteLength(name);
    const valueBytes = Buffer.byteLength(value);
    if (nameBytes === 0 || nameBytes > MAX_ATTRIBUTE_NAME_BYTES) {
      return `attribute name '${name.slice(0, 40)}' is ${nameBytes} bytes; Pub/Sub takes 1 to ${MAX_ATTRIBUTE_NAME_BYTES}`;
    }
    if (valueBytes > MAX_ATTRIBUTE_VALUE_BYTES) {
      return `attribute '${name}' is ${valueBytes} bytes; Pub/Sub takes at most ${MAX_ATTRIBUTE_VALUE_BYTES} per value`;
    }
    size += nameBytes + valueBytes;
  }
  if (Buffer.byteLength(orderingKey) > MAX_ORDERING_KEY_BYTES) {
    return `the ordering key is ${Buffer.byteLength(orderingKey)} bytes; Pub/Sub takes at most ${MAX_ORDERING_KEY_BYTES}`;
  }
  if (size > MAX_MESSAGE_BYTES) {
    return `${size} bytes (data, attributes and ordering key); Pub/Sub takes at most ${MAX_MESSAGE_BYTES}`;
  }
  return undefined;
}
