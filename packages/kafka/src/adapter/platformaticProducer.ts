/**
 * Producing on @platformatic/kafka behind the client interface: the adapter's dead
 * letters, `send()` with your own @platformatic/kafka producer, and the outbox producer.
 * Records cross in kafkajs' shape (`OutgoingRecord`) and are written as kafkajs writes
 * them: acks from every in-sync replica, a key's partition by Java's murmur2.
 */
import { compatibilityPartitioner, Producer } from '@platformatic/kafka';
import type { ResolvedKafkaConfig } from '../config.js';
import type { OutgoingRecord, RecordProducer, RecordProducerOptions, SentRecord } from './clientApi.js';
import { baseOptions, typed } from './platformaticOptions.js';

/** What a record becomes for @platformatic/kafka. */
type PlatformaticRecord = {
  topic: string;
  key?: Buffer;
  value?: Buffer;
  partition?: number;
  headers: Map<Buffer, Buffer>;
};

/** An idempotent producer of the adapter's own, from the `broker` options. */
export function ownPlatformaticProducer(
  config: ResolvedKafkaConfig,
  options: RecordProducerOptions = {},
): RecordProducer {
  // Idempotent: a retried send after a lost acknowledgement does not write the record twice.
  const producer = new Producer({
    ...baseOptions(config, `${config.clientId}-producer`),
    autocreateTopics: options.allowAutoTopicCreation ?? false,
    idempotent: true,
    acks: -1,
  });
  return platformaticRecordProducer(producer);
}

/**
 * A @platformatic/kafka producer (the adapter's own or yours) behind the interface. Its
 * own default partitioner is an unsigned murmur2 (`>>> 0`), which puts about half of all
 * keys on another partition than kafkajs and Java clients do (`& 0x7fffffff`): every send
 * names the compatible one, so per-key order holds across a switch of client.
 */
export function platformaticRecordProducer(
  producer: Producer<Buffer, Buffer, Buffer, Buffer>,
): RecordProducer {
  return {
    // Connects on the first send.
    connect: async () => {},
    // No per-send replica timeout: @platformatic/kafka takes it from the producer's `timeout`
    // option (`broker.requestTimeout` for the adapter's own producer).
    async send(topic, records): Promise<SentRecord[]> {
      let result: Awaited<ReturnType<typeof producer.send>>;
      try {
        result = await producer.send({
          acks: -1,
          partitioner: compatibilityPartitioner,
          messages: records.map((record) => toPlatformaticRecord(topic, record)),
        });
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
