import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError, silentLogger } from '@oncely/core';
import type { Kafka } from 'kafkajs';
import type { ClusterAdmin, KafkaClientDriver, RecordProducer } from './adapter/clientApi.js';
import { loadDriver } from './adapter/loadDriver.js';
import { type KafkaBrokerOptions, resolveKafkaConfig } from './config.js';
import { KafkaSendError } from './errors.js';
import {
  type KafkaProducerLike,
  type KafkaSendMessage,
  MESSAGE_ID_HEADER,
  recordProducerOf,
  sendRecords,
} from './send.js';

/**
 * The connection options of the `broker` section (`client`, `brokers`, `clientId`, `ssl`,
 * `sasl`, `retry`, the timeouts, `logLevel`), for an outbox producer built from them.
 */
export type KafkaProducerBrokerOptions = Omit<KafkaBrokerOptions, 'topic'>;

/** Kafka's default `message.max.bytes` (a broker or topic may set another). */
const DEFAULT_MAX_MESSAGE_BYTES = 1_048_588;
/** A record batch's own header (format v2). */
const BATCH_OVERHEAD_BYTES = 61;
/**
 * What a record adds beyond its key, value and header bytes: its length, attributes,
 * timestamp and offset deltas and the varint lengths (at most ~25 bytes), plus room for
 * the trace headers `send` adds (traceparent, tracestate).
 */
const RECORD_OVERHEAD_BYTES = 25 + 256;

/**
 * Options of {@link createKafkaProducer}: the `broker` options (on kafkajs or
 * @platformatic/kafka, by `broker.client`) or a kafkajs `Kafka` client the outbox producer
 * creates an idempotent producer from (and closes on `close()`), or your own producer.
 *
 * @example
 * ```ts
 * createKafkaProducer({ broker: { brokers: ['127.0.0.1:9092'], client: 'platformatic' } });
 * createKafkaProducer({ kafka: new Kafka({ brokers: ['127.0.0.1:9092'] }) });
 * ```
 */
export interface KafkaProducerOptions {
  /**
   * A producer of your own: a connected kafkajs `Producer` or a @platformatic/kafka
   * `Producer` (default serialisers); best created idempotent. The outbox producer never
   * closes it.
   */
  producer?: KafkaProducerLike;
  /**
   * Connection options as in the consumer's `broker` section (no `topic`): the outbox
   * producer creates an idempotent producer on `broker.client` from them (kafkajs is not
   * loaded for `client: 'platformatic'`) and reads each topic's `max.message.bytes` with
   * an admin client of the same library.
   */
  broker?: KafkaProducerBrokerOptions;
  /**
   * A client to create `kafka.producer({ idempotent: true, maxInFlightRequests: 1 })` from
   * (unless `producer` is given too), and to read each topic's `max.message.bytes` with.
   * Give it with your own `producer` as well, or set `maxMessageBytes`: see there why.
   */
  kafka?: Kafka;
  /** How long the in-sync replicas may take to acknowledge (`acks: -1`). @default 30000 */
  timeoutMs?: number;
  /**
   * The largest record batch a topic takes (the broker refuses a partition's whole batch
   * past it with `MESSAGE_TOO_LARGE`). Records are packed below it before sending, and a
   * record over it alone fails by itself, permanently, without being sent.
   *
   * Unknown (your own `producer` without `kafka`), records are packed below Kafka's
   * default 1,048,588 bytes and a record is never refused before sending; a batch the
   * topic still refuses (its limit is lower) is split until the record too large is
   * alone. That split costs an idempotent producer of yours its sequence numbers: kafkajs
   * rolls back every partition of the refused request although the broker wrote the
   * others, and the broker then answers OUT_OF_ORDER_SEQUENCE_NUMBER to that producer's
   * next batches of those partitions. Give `kafka` or `maxMessageBytes` with your own
   * producer. (One the outbox producer created is replaced after such a split.)
   * @default each topic's `max.message.bytes`, read once per topic with `describeConfigs`
   * when `kafka` is given
   */
  maxMessageBytes?: number;
}

/**
 * The outbox producer for Kafka: each row becomes a record on the topic named by its
 * destination, with the row's ID in the `message-id` header (what the Kafka consumer's
 * default ID strategy reads), the row's key as the record key (per-key order: one
 * partition) or, without a key, the ID. Records of one topic go in `send`s of at most
 * the topic's `max.message.bytes` with `acks: -1`; they are sent once every in-sync
 * replica has them. A record the broker refuses as too large fails alone (permanently:
 * the relay dead-letters it and its key moves on); a batch refused as too large is split
 * until it is accepted, so a row is never failed for the size of its neighbours. An
 * idempotent producer keeps kafkajs' own retries from writing a record twice; the relay's
 * retries (same ID) are absorbed by the consumer's marker.
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
  if (options.producer === undefined && options.kafka === undefined && options.broker === undefined) {
    throw new ConfigError('producer', 'needs a producer or a kafka client, or broker options');
  }
  if (options.broker !== undefined && options.kafka !== undefined) {
    throw new ConfigError(
      'producer',
      'takes broker options or a kafka client, not both (broker.kafka is the client)',
    );
  }
  if (options.broker !== undefined && 'topic' in (options.broker as object)) {
    throw new ConfigError(
      'broker.topic',
      "is not an outbox producer option: each row's destination is its topic",
    );
  }
  // The library the outbox producer's own producer and admin run on (none with only `producer`).
  const config =
    options.broker !== undefined || options.kafka !== undefined
      ? resolveKafkaConfig(
          options.kafka !== undefined
            ? { type: 'kafka', topic: 'oncely-outbox', kafka: options.kafka }
            : { ...options.broker, type: 'kafka', topic: 'oncely-outbox' },
          'outbox',
        )
      : undefined;
  let driverLoad: Promise<KafkaClientDriver> | undefined;
  const driver = (): Promise<KafkaClientDriver> => {
    driverLoad ??= loadDriver({ config: config!, log: silentLogger, concurrency: 1 }).catch((error) => {
      driverLoad = undefined;
      throw error;
    });
    return driverLoad;
  };
  if (
    options.maxMessageBytes !== undefined &&
    (!Number.isInteger(options.maxMessageBytes) || options.maxMessageBytes <= BATCH_OVERHEAD_BYTES)
  ) {
    throw new ConfigError(
      'maxMessageBytes',
      `must be an integer above ${BATCH_OVERHEAD_BYTES} (the topic's max.message.bytes), got ${String(options.maxMessageBytes)}`,
    );
  }
  let yours: Promise<RecordProducer> | undefined;
  let own: Promise<RecordProducer> | undefined;
  const producer = (): Promise<RecordProducer> => {
    if (options.producer) {
      yours ??= recordProducerOf(options.producer);
      return yours;
    }
    own ??= (async () => {
      // A topic the broker may create on first use is created, as a kafkajs producer did by default.
      const created = (await driver()).producer({ allowAutoTopicCreation: true });
      await created.connect();
      return created;
    })().catch((error) => {
      own = undefined;
      throw error;
    });
    return own;
  };
  // After a request the broker refused for one partition's batch, kafkajs rolls back the
  // sequence numbers of every partition in it, although the broker wrote the others: the
  // next batch of such a partition reuses a sequence the broker already holds and is
  // refused (OUT_OF_ORDER_SEQUENCE_NUMBER, every later batch too). A new producer (a new
  // producer ID) starts clean. Only a producer this outbox producer created is replaced.
  const renewOwnProducer = async (): Promise<void> => {
    const created = own;
    own = undefined;
    const client = await created?.catch(() => undefined);
    await client?.disconnect().catch(() => {});
  };

  let admin: Promise<ClusterAdmin> | undefined;
  const limits = new Map<string, Promise<number | undefined>>();
  const topicLimit = (topic: string): Promise<number | undefined> => {
    if (options.maxMessageBytes !== undefined) return Promise.resolve(options.maxMessageBytes);
    if (!config) return Promise.resolve(undefined);
    let limit = limits.get(topic);
    if (!limit) {
      limit = (async () => {
        admin ??= (async () => {
          const created = (await driver()).admin();
          await created.connect();
          return created;
        })().catch((error) => {
          admin = undefined;
          throw error;
        });
        const value = await (await admin).maxMessageBytes(topic);
        return Number.isInteger(value) && value > 0 ? value : DEFAULT_MAX_MESSAGE_BYTES;
      })().catch(() => {
        // Unknown for now (a missing topic, no Describe permission): sent unpacked, and a
        // refused batch is split. Asked again on the next send.
        limits.delete(topic);
        return undefined;
      });
      limits.set(topic, limit);
    }
    return limit;
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
      let client: RecordProducer;
      try {
        client = await producer();
      } catch (error) {
        return messages.map(() => ({ ok: false, error }));
      }
      const record = (index: number): KafkaSendMessage => {
        const message = messages[index]!;
        return {
          id: message.id,
          value: Buffer.from(message.body),
          key: message.key ?? message.id,
          headers: { ...message.attributes },
        };
      };
      const sendOptions = {
        retries: 0,
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      };

      /** Sends `indexes` in one request; a request refused as too large is split in halves. */
      const sendChunk = async (topic: string, indexes: number[]): Promise<void> => {
        try {
          await sendRecords(client, topic, indexes.map(record), sendOptions);
          for (const index of indexes) results[index] = { ok: true };
        } catch (error) {
          if (!tooLarge(error)) {
            for (const index of indexes) results[index] = { ok: false, error };
            return;
          }
          if (indexes.length === 1) {
            // Too large alone is too large for good: no retry can send it.
            results[indexes[0]!] = {
              ok: false,
              permanent: true,
              error: new KafkaSendError(
                `record ${messages[indexes[0]!]!.id} is too large for '${topic}' even alone (the broker refused it: ${sizeErrorType(error)})`,
                { cause: error },
              ),
            };
            return;
          }
          // Other partitions of this request may have been written: their records go again
          // (same IDs, the receiver's marker absorbs them) on a producer whose sequence
          // numbers match what the broker holds.
          if (!options.producer) {
            await renewOwnProducer();
            try {
              client = await producer();
            } catch (reconnect) {
              for (const index of indexes) results[index] = { ok: false, error: reconnect };
              return;
            }
          }
          const half = Math.ceil(indexes.length / 2);
          await sendChunk(topic, indexes.slice(0, half));
          await sendChunk(topic, indexes.slice(half));
        }
      };

      await Promise.all(
        [...byTopic].map(async ([topic, indexes]) => {
          const known = await topicLimit(topic);
          const limit = known ?? DEFAULT_MAX_MESSAGE_BYTES;
          // Packed below the topic's limit before sending: the broker refuses a partition's
          // whole batch past it, and a record over a known limit is refused without a send.
          let chunk: number[] = [];
          let bytes = BATCH_OVERHEAD_BYTES;
          for (const index of indexes) {
            const size = recordSize(record(index));
            if (known !== undefined && BATCH_OVERHEAD_BYTES + size > known) {
              results[index] = {
                ok: false,
                permanent: true,
                error: new KafkaSendError(
                  `record ${messages[index]!.id} is too large for '${topic}': about ${BATCH_OVERHEAD_BYTES + size} bytes, the topic takes at most ${limit} (max.message.bytes)`,
                ),
              };
              continue;
            }
            if (chunk.length > 0 && bytes + size > limit) {
              await sendChunk(topic, chunk);
              chunk = [];
              bytes = BATCH_OVERHEAD_BYTES;
            }
            chunk.push(index);
            bytes += size;
          }
          if (chunk.length > 0) await sendChunk(topic, chunk);
        }),
      );
      return results;
    },
    async close(): Promise<void> {
      const createdAdmin = admin;
      admin = undefined;
      await (await createdAdmin?.catch(() => undefined))?.disconnect().catch(() => {});
      await renewOwnProducer();
    },
  };
}

/** An upper bound of what a record takes in a record batch (format v2, no compression). */
function recordSize(record: KafkaSendMessage): number {
  let size = RECORD_OVERHEAD_BYTES + byteLength(record.value) + byteLength(record.key ?? '');
  const headers = { ...record.headers, [MESSAGE_ID_HEADER]: record.id };
  for (const [name, value] of Object.entries(headers)) {
    size += 10 + Buffer.byteLength(name) + (value === undefined ? 0 : byteLength(value as Buffer | string));
  }
  return size;
}

function byteLength(value: unknown): number {
  if (Buffer.isBuffer(value)) return value.length;
  if (typeof value === 'string') return Buffer.byteLength(value);
  if (Array.isArray(value)) return value.reduce((sum: number, item) => sum + byteLength(item), 0);
  return Buffer.byteLength(JSON.stringify(value) ?? 'null');
}

/** The broker refused the request's size: a record batch over `max.message.bytes`, or a request too large. */
function tooLarge(error: unknown): boolean {
  return sizeErrorType(error) !== undefined;
}

/** `MESSAGE_TOO_LARGE` or `RECORD_LIST_TOO_LARGE` when kafkajs' error (or a cause of it) is one. */
function sizeErrorType(error: unknown): string | undefined {
  for (let e = error as { type?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 8; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return e.type;
    e = e.cause === e ? undefined : (e.cause as typeof e);
  }
  return undefined;
}
