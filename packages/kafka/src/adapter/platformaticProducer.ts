/**
 * Producing on @platformatic/kafka behind the client interface: the adapter's dead
 * letters, `send()` with your own @platformatic/kafka producer, and the outbox producer.
 * Records cross in kafkajs' shape (`OutgoingRecord`) and are written as kafkajs writes
 * them: acks from every in-sync replica, a key's partition by Java's murmur2.
 */
import { compatibilityPartitioner, type Producer } from '@platformatic/kafka';
import type { ResolvedKafkaConfig } from '../config.js';
import {
  kafkaTypedError,
  missingPartitionError,
  type OutgoingRecord,
  type RecordProducer,
  type RecordProducerOptions,
  type SentRecord,
} from './clientApi.js';
import { newProducer } from './platformaticFactories.js';
import { baseOptions, typed } from './platformaticOptions.js';

/** What a record becomes for @platformatic/kafka. */
type PlatformaticRecord = {
  topic: string;
  key?: Buffer;
  value?: Buffer;
  partition?: number;
  headers: Map<Buffer, Buffer>;
};

/** kafkajs' (and Java's `metadata.max.age.ms`) default. */
const KAFKAJS_METADATA_MAX_AGE_MS = 300_000;

/** An idempotent producer of the adapter's own, from the `broker` options. */
export function ownPlatformaticProducer(
  config: ResolvedKafkaConfig,
  options: RecordProducerOptions = {},
): RecordProducer {
  // Idempotent: a retried send after a lost acknowledgement does not write the record twice.
  const producer = newProducer(config, {
    ...baseOptions(config, `${config.clientId}-producer`),
    autocreateTopics: options.allowAutoTopicCreation ?? false,
    idempotent: true,
    acks: -1,
    // A topic's partition count is re-read after 5 minutes, as kafkajs and Java clients
    // do (metadata.max.age.ms), not its default 5 s: after partitions are added, a key
    // goes where those clients put it meanwhile. A moved leader still refreshes at once.
    metadataMaxAge: KAFKAJS_METADATA_MAX_AGE_MS,
  });
  return platformaticRecordProducer(producer);
}

/**
 * A @platformatic/kafka producer (the adapter's own or yours) behind the interface. Its
 * own default partitioner is an unsigned murmur2 (`>>> 0`), which puts about half of all
 * keys on another partition than kafkajs and Java clients do (`& 0x7fffffff`): every send
 * names a compatible one, so per-key order holds across a switch of client.
 */
export function platformaticRecordProducer(
  producer: Producer<Buffer, Buffer, Buffer, Buffer>,
): RecordProducer {
  // compatibilityPartitioner gives every keyless record partition 0 (a named partitioner
  // replaces @platformatic/kafka's round robin): keyless records take turns, as on kafkajs.
  let turn = 0;
  const partitioner = (message: unknown, key: Buffer | undefined): number =>
    Buffer.isBuffer(key) ? compatibilityPartitioner(message as never, key) : turn++ & 0x7fffffff;
  return {
    // Connects on the first send.
    connect: async () => {},
    // No per-send replica timeout: @platformatic/kafka takes it from the producer's `timeout`
    // option (`broker.requestTimeout` for the adapter's own producer). `timeoutMs` bounds
    // the whole send instead: on a broker that drops every connection it reconnects
    // without end and its send never settles, whatever its own retries and timeouts.
    async send(topic, records, options = {}): Promise<SentRecord[]> {
      let result: Awaited<ReturnType<typeof producer.send>>;
      try {
        result = await withinTime(
          (async () => {
            await checkPartitions(producer, topic, records);
            return producer.send({
              acks: -1,
              partitioner,
              messages: records.map((record) => toPlatformaticRecord(topic, record)),
            });
          })(),
          topic,
          options.timeoutMs,
        );
      } catch (error) {
        throw typed(error);
      }
      return (result.offsets ?? []).map((written) => ({
        topicName: written.topic,
        partition: written.partition,
        errorCode: 0,
        baseOffset: written.offset.toString(),
      }));
    },
    disconnect: () => producer.close(),
  };
}

/**
 * `sending` within `timeoutMs` (unbounded without), else a retriable REQUEST_TIMED_OUT:
 * the send goes on in the background and may still write the records, as a send kafkajs
 * gave up on may have (a retry with the same IDs is met by the consumer's marker).
 */
async function withinTime<T>(sending: Promise<T>, topic: string, timeoutMs: number | undefined): Promise<T> {
  if (timeoutMs === undefined) return sending;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = kafkaTypedError(
        'REQUEST_TIMED_OUT',
        `no answer from the cluster to a send to '${topic}' within ${timeoutMs} ms`,
      );
      reject(Object.assign(error, { retriable: true }));
    }, timeoutMs);
  });
  sending.catch(() => {});
  try {
    return await Promise.race([sending, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Refuses a record of a partition `topic` lacks before anything is sent:
 * @platformatic/kafka would write it to that partition modulo the partition count.
 */
async function checkPartitions(
  producer: Producer<Buffer, Buffer, Buffer, Buffer>,
  topic: string,
  records: OutgoingRecord[],
): Promise<void> {
  const named = records.filter((record) => record.partition !== undefined);
  if (named.length === 0) return;
  const metadata = await producer.metadata({ topics: [topic] });
  const partitions = metadata.topics.get(topic)?.partitionsCount ?? 0;
  const missing = named.find((record) => (record.partition as number) >= partitions);
  if (missing) throw missingPartitionError(topic, missing.partition as number, partitions);
}

function toPlatformaticRecord(topic: string, record: OutgoingRecord): PlatformaticRecord {
  // A Map of Buffers: with an object, the default serialisers get the names as strings
  // and the send fails (an idempotent producer's send never settles then).
  const headers = new Map<Buffer, Buffer>();
  for (const [name, value] of Object.entries(record.headers ?? {})) {
    for (const one of Array.isArray(value) ? value : [value]) {
      const buffer = toBuffer(one as Buffer | string | undefined);
      if (buffer !== undefined) headers.set(Buffer.from(name), buffer);
    }
  }
  const key = toBuffer(record.key);
  const value = toBuffer(record.value);
  return {
    topic,
    ...(key !== undefined ? { key } : {}),
    ...(value !== undefined ? { value } : {}),
    ...(record.partition !== undefined ? { partition: record.partition } : {}),
    headers,
  };
}

function toBuffer(value: Buffer | string | null | undefined): Buffer | undefined {
  if (value === null || value === undefined) return undefined;
  return typeof value === 'string' ? Buffer.from(value) : value;
}
