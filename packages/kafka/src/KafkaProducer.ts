import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import type { Kafka, Producer } from 'kafkajs';
import { send } from './send.js';

/**
 * Options of {@link createKafkaProducer}: your connected kafkajs producer, or a `Kafka`
 * client the outbox producer creates an idempotent producer from (and disconnects on
 * `close()`).
 *
 * @example
 * ```ts
 * createKafkaProducer({ kafka: new Kafka({ brokers: ['127.0.0.1:9092'] }) });
 * ```
 */
export interface KafkaProducerOptions {
  /** A connected producer; best created with `idempotent: true`. The outbox producer never disconnects it. */
  producer?: Producer;
  /** A client to create `kafka.producer({ idempotent: true, maxInFlightRequests: 1 })` from. */
  kafka?: Kafka;
  /** How long the in-sync replicas may take to acknowledge (`acks: -1`). @default 30000 */
  timeoutMs?: number;
}

/**
 * The outbox producer for Kafka: each row becomes a record on the topic named by its
 * destination, with the row's ID in the `message-id` header (what the Kafka consumer's
 * default ID strategy reads), the row's key as the record key (per-key order: one
 * partition) or, without a key, the ID. Records of one topic go in one `send` with
 * `acks: -1`; they are sent once every in-sync replica has them. An idempotent producer
 * keeps kafkajs' own retries from writing a record twice; the relay's retries (same ID)
 * are absorbed by the consumer's marker.
 *
 * @example
 * ```ts
 * import { createRelay } from '@oncely/postgres';
 * import { createKafkaProducer } from '@oncely/kafka';
 *
 * const producer = createKafkaProducer({ kafka });
 * const relay = createRelay({ store, producers: producer });
 * await relay.start();
 * // ... on shutdown
 * await relay.stop();
 * await producer.close();
 * ```
 */
export function createKafkaProducer(
  options: KafkaProducerOptions,
): OutboxProducer & { close(): Promise<void> } {
  if (typeof options !== 'object' || options === null)
    throw new ConfigError('producer', 'options are required');
  if ((options.producer === undefined) === (options.kafka === undefined)) {
    throw new ConfigError('producer', 'needs exactly one of producer or kafka');
  }
  let own: Promise<Producer> | undefined;
  const producer = (): Promise<Producer> => {
    if (options.producer) return Promise.resolve(options.producer);
    own ??= (async () => {
      const created = options.kafka!.producer({ idempotent: true, maxInFlightRequests: 1 });
      await created.connect();
      return created;
    })().catch((error) => {
      own = undefined;
      throw error;
    });
    return own;
  };

  return {
    async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      const results: OutboxSendResult[] = new Array(messages.length);
      const byTopic = new Map<string, number[]>();
      messages.forEach((message, index) => {
        const list = byTopic.get(message.destination) ?? [];
        list.push(index);
        byTopic.set(message.destination, list);
      });
      let client: Producer;
      try {
        client = await producer();
      } catch (error) {
        return messages.map(() => ({ ok: false, error }));
      }
      await Promise.all(
        [...byTopic].map(async ([topic, indexes]) => {
          try {
            await send(
              client,
              topic,
              indexes.map((index) => {
                const message = messages[index]!;
                return {
                  id: message.id,
                  value: Buffer.from(message.body),
                  key: message.key ?? message.id,
                  headers: { ...message.attributes },
                };
              }),
              { retries: 0, ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) },
            );
            for (const index of indexes) results[index] = { ok: true };
          } catch (error) {
            for (const index of indexes) results[index] = { ok: false, error };
          }
        }),
      );
      return results;
    },
    async close(): Promise<void> {
      const created = own;
      own = undefined;
      if (!created) return;
      const client = await created.catch(() => undefined);
      await client?.disconnect().catch(() => {});
    },
  };
}
