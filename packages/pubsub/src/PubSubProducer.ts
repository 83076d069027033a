import type { PubSub, Topic } from '@google-cloud/pubsub';
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import { PubSubMessageInvalidError } from './errors.js';
import { publishWithId } from './publishWithId.js';

/** gRPC's INVALID_ARGUMENT: what the service answers for a Publish call it refuses. */
const INVALID_ARGUMENT = 3;

/**
 * Options of {@link createPubSubProducer}.
 *
 * @example
 * ```ts
 * createPubSubProducer({ pubsub: new PubSub({ projectId }) });
 * ```
 */
export interface PubSubProducerOptions {
  /** Your client; the producer never closes it. */
  pubsub: PubSub;
  /** The attribute the ID goes in. @default 'message-id' (the adapter's default ID strategy) */
  idAttribute?: string;
}

/**
 * The outbox producer for Pub/Sub: publishes each row to the topic named by its
 * destination with `publishWithId` (the row's ID in the `message-id` attribute, the
 * adapter's default ID strategy), the row's key as the ordering key (the topic objects
 * are created with `messageOrdering: true`; a subscription with message ordering keeps
 * per-key order). A row counts as sent once the service returned its message ID. A failed
 * publish of a keyed row resumes publishing for that key, so the relay's retry can go out.
 *
 * Failures stay with their message: one the service would refuse (too large, too many
 * attributes, a value too long) is failed permanently before it is published; a message
 * whose batch the service refused anyway (INVALID_ARGUMENT, for the whole Publish call) is
 * published again alone, and fails permanently only if refused alone; a topic that does
 * not exist fails its own rows (retried: it may be created).
 *
 * @example
 * ```ts
 * import { createRelay } from '@oncely/postgres';
 * import { createPubSubProducer } from '@oncely/pubsub';
 *
 * const relay = createRelay({ store, producers: createPubSubProducer({ pubsub }) });
 * await relay.start();
 * ```
 */
export function createPubSubProducer(options: PubSubProducerOptions): OutboxProducer {
  if (typeof options !== 'object' || options === null || !options.pubsub) {
    throw new ConfigError('pubsub', 'a PubSub client is required');
  }
  const topics = new Map<string, Topic>();
  const soloTopics = new Map<string, Topic>();
  const topicOf = (name: string): Topic => {
    let topic = topics.get(name);
    if (!topic) {
      topic = options.pubsub.topic(name, { messageOrdering: true });
      topics.set(name, topic);
    }
    return topic;
  };
  /** The same topic with one message a Publish call: a refusal is then the message's own. */
  const soloTopicOf = (name: string): Topic => {
    let topic = soloTopics.get(name);
    if (!topic) {
      topic = options.pubsub.topic(name, { messageOrdering: true, batching: { maxMessages: 1 } });
      soloTopics.set(name, topic);
    }
    return topic;
  };
  const publish = (topic: Topic, message: OutboxMessage) =>
    publishWithId(
      topic,
      {
        id: message.id,
        body: Buffer.from(message.body),
        attributes: message.attributes,
        ...(message.key !== undefined ? { orderingKey: message.key } : {}),
      },
      { attempts: 1, ...(options.idAttribute ? { idAttribute: options.idAttribute } : {}) },
    );
  const resume = (topic: Topic, message: OutboxMessage) => {
    if (message.key !== undefined) topic.resumePublishing(message.key);
  };
  return {
    send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      return Promise.all(
        messages.map(async (message): Promise<OutboxSendResult> => {
          try {
            await publish(topicOf(message.destination), message);
            return { ok: true };
          } catch (error) {
            resume(topicOf(message.destination), message);
            if (error instanceof PubSubMessageInvalidError) return { ok: false, error, permanent: true };
            if (grpcCode(error) !== INVALID_ARGUMENT) return { ok: false, error };
          }
          // The service refused the Publish call this message was batched in: perhaps for
          // another message of the batch. Alone, a refusal is its own, for good.
          try {
            await publish(soloTopicOf(message.destination), message);
            return { ok: true };
          } catch (error) {
            resume(soloTopicOf(message.destination), message);
            return grpcCode(error) === INVALID_ARGUMENT
              ? { ok: false, error, permanent: true }
              : { ok: false, error };
          }
        }),
      );
    },
  };
}

function grpcCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}
