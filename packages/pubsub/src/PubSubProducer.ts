import type { PubSub, Topic } from '@google-cloud/pubsub';
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import { publishWithId } from './publishWithId.js';

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
  const topicOf = (name: string): Topic => {
    let topic = topics.get(name);
    if (!topic) {
      topic = options.pubsub.topic(name, { messageOrdering: true });
      topics.set(name, topic);
    }
    return topic;
  };
  return {
    send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      return Promise.all(
        messages.map(async (message): Promise<OutboxSendResult> => {
          try {
            await publishWithId(
              topicOf(message.destination),
              {
                id: message.id,
                body: Buffer.from(message.body),
                attributes: message.attributes,
                ...(message.key !== undefined ? { orderingKey: message.key } : {}),
              },
              { attempts: 1, ...(options.idAttribute ? { idAttribute: options.idAttribute } : {}) },
            );
            return { ok: true };
          } catch (error) {
            if (message.key !== undefined) topicOf(message.destination).resumePublishing(message.key);
            return { ok: false, error };
          }
        }),
      );
    },
  };
}
