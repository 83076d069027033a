/**
 * The producer side on the client library under test (ONCELY_KAFKA_CLIENT: 'kafkajs' or
 * 'platformatic', see support/harness.ts), on the real broker: `send()` with a producer of
 * that client, and the outbox producer built from the `broker` options. Records must
 * arrive with the same keys, headers and partitions whichever client wrote them (a key's
 * partition is kafkajs' / Java's murmur2, so per-key order holds across a switch), and the
 * failures must map to the same Oncely errors. On platformatic, a child process without
 * kafkajs (its import refused) produces through the package too.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { OutboxMessage } from '@oncely/core';
import { createKafkaProducer, KafkaSendError, MESSAGE_ID_HEADER, send } from '@oncely/kafka';
import { type Admin, type Kafka, type KafkaMessage, Partitioners } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';

const brokers = testBrokers();
const client = clientUnderTest().client ?? 'kafkajs';

/** A connected idempotent producer of the client under test, and how to close it. */
async function producerOfClient(): Promise<{ producer: unknown; close(): Promise<void> }> {
  if (client === 'platformatic') {
    const { Producer } = await import('@platformatic/kafka');
    const producer = new Producer({
      clientId: 'oncely-producer-clients-test',
      bootstrapBrokers: brokers!,
      idempotent: true,
      acks: -1,
      autocreateTopics: false,
    });
    return { producer, close: () => producer.close() };
  }
  const producer = kafkaClient(brokers!).producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  return { producer, close: () => producer.disconnect() };
}

/** The first `count` records of `topic` (all partitions), read with a kafkajs consumer of its own group. */
async function readRecords(
  kafka: Kafka,
  topic: string,
  count: number,
): Promise<Array<KafkaMessage & { partition: number }>> {
  const consumer = kafka.consumer({ groupId: uniqueName('reader'), maxWaitTimeInMs: 200 });
  const records: Array<KafkaMessage & { partition: number }> = [];
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const all = new Promise<void>((resolve) => {
    void consumer.run({
      eachMessage: async ({ partition, message }) => {
        records.push({ ...message, partition });
        if (records.length >= count) resolve();
      },
    });
  });
  await Promise.race([
    all,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`only ${records.length} of ${count} records arrived`)), 60_000),
    ),
  ]);
  await consumer.disconnect();
  return records;
}

/** The partition kafkajs' default (Java-compatible murmur2) partitioner gives `key`. */
function javaPartition(topic: string, key: string | Buffer, partitions: number): number {
  const partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({
    partitionId,
    leader: 1,
    replicas: [1],
    isr: [1],
    partitionErrorCode: 0,
  }));
  return Partitioners.DefaultPartitioner()({ topic, partitionMetadata, message: { key, value: null } });
}

function outboxMessage(topic: string, id: string, key: string | undefined, body = id): OutboxMessage {
  return {
    id,
    destination: topic,
    body: Buffer.from(body),
    ...(key !== undefined ? { key } : {}),
    attributes: { origin: 'outbox' },
    attempt: 1,
  };
}

describe.skipIf(!brokers)(`kafka producer on ${client}`, () => {
  let kafka: Kafka;
  let admin: Admin;

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-producer-clients-test');
    admin = kafka.admin();
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.disconnect();
  });

  it('send() writes IDs, keys, headers and partitions as kafkajs does', async () => {
    const topic = uniqueName('send-clients');
    await createTopic(admin, topic, 6);
    const { producer, close } = await producerOfClient();
    try {
      // 24 keys: with 6 partitions, some have murmur2's top bit set, where an unsigned
      // murmur2 (@platformatic/kafka's own default) picks another partition than Java's.
      const messages = Array.from({ length: 24 }, (_, i) => ({
        id: `${topic}-${i}`,
        key: `customer-${i}`,
        value: { n: i },
        headers: { origin: 'send' },
      }));
      await send(producer as never, topic, messages, { retries: 0 });
      await send(producer as never, topic, { id: `${topic}-fixed`, value: 'fixed', partition: 5 });
      const records = await readRecords(kafka, topic, 25);
      const byId = new Map(records.map((r) => [r.headers?.[MESSAGE_ID_HEADER]?.toString(), r]));
      for (const [i, message] of messages.entries()) {
        const record = byId.get(message.id);
        expect(record, message.id).toBeDefined();
        expect(record!.key?.toString()).toBe(message.key);
        expect(JSON.parse(record!.value!.toString())).toEqual({ n: i });
        expect(record!.headers?.origin?.toString()).toBe('send');
        expect({ key: message.key, partition: record!.partition }).toEqual({
          key: message.key,
          partition: javaPartition(topic, message.key, 6),
        });
      }
      const fixed = byId.get(`${topic}-fixed`);
      expect(fixed?.partition).toBe(5);
      // Without a key, the ID is the key.
      expect(fixed?.key?.toString()).toBe(`${topic}-fixed`);
    } finally {
      await close();
    }
  });

  it('send() puts keys of every kind where kafkajs does, spreads keyless records, refuses a partition the topic lacks', async () => {
    const topic = uniqueName('send-keys');
    await createTopic(admin, topic, 4);
    const { producer, close } = await producerOfClient();
    try {
      const keyed = [
        { id: `${topic}-empty`, key: '' },
        { id: `${topic}-binary`, key: Buffer.from([0xff, 0x00, 0x80, 0x7f]) },
        { id: `${topic}-utf8`, key: 'ключ-🔑' },
        { id: `${topic}-utf8-buffer`, key: Buffer.from('ключ-🔑') },
      ];
      await send(
        producer as never,
        topic,
        keyed.map((m) => ({ ...m, value: 'k' })),
        { retries: 0 },
      );
      // No key: kafkajs (as Java) spreads these over the partitions, not all on one.
      const keyless = Array.from({ length: 8 }, (_, i) => ({
        id: `${topic}-nokey-${i}`,
        key: null,
        value: 'n',
      }));
      await send(producer as never, topic, keyless, { retries: 0 });
      // A partition the topic lacks, or no partition number: refused with nothing written
      // (kafkajs resolved with [] and dropped the record, @platformatic/kafka wrote 7 to 7 % 4).
      for (const partition of [7, -1, 1.5]) {
        const error = await send(
          producer as never,
          topic,
          { id: `${topic}-p${partition}`, value: 'p', partition },
          {
            retries: 0,
          },
        ).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error, `partition ${partition}`).toBeInstanceOf(KafkaSendError);
        expect((error as Error).message, `partition ${partition}`).toMatch(
          new RegExp(`partition ${partition}`),
        );
      }
      const records = await readRecords(kafka, topic, keyed.length + keyless.length);
      const byId = new Map(records.map((r) => [r.headers?.[MESSAGE_ID_HEADER]?.toString(), r]));
      for (const { id, key } of keyed) {
        const record = byId.get(id);
        expect(Buffer.from(record!.key!).equals(Buffer.from(key))).toBe(true);
        expect({ id, partition: record!.partition }).toEqual({
          id,
          partition: javaPartition(topic, key as never, 4),
        });
      }
      const keylessPartitions = new Set(keyless.map(({ id }) => byId.get(id)!.partition));
      expect(keylessPartitions.size).toBe(4);
      const written = (await admin.fetchTopicOffsets(topic)).reduce((sum, p) => sum + Number(p.high), 0);
      expect(written).toBe(keyed.length + keyless.length);
    } finally {
      await close();
    }
  });

  // A port that accepts and drops every connection (a broker going down mid-send, a proxy
  // in front of none): @platformatic/kafka reconnects without end and its send never
  // settled, whatever its own retries and timeouts; kafkajs gives up after its retries.
  it.skipIf(client !== 'platformatic')(
    'send() on a broker that drops every connection rejects within timeoutMs per attempt',
    async () => {
      const { createServer } = await import('node:net');
      let connections = 0;
      const server = createServer((socket) => {
        connections++;
        socket.destroy();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { Producer } = await import('@platformatic/kafka');
      const producer = new Producer({
        clientId: 'oncely-dropped-test',
        bootstrapBrokers: [`127.0.0.1:${(server.address() as { port: number }).port}`],
        idempotent: true,
        acks: -1,
        retries: 0,
      });
      try {
        const error = await send(
          producer as never,
          'any',
          { id: 'dropped', value: 1 },
          {
            retries: 1,
            retryDelayMs: 10,
            timeoutMs: 1500,
          },
        ).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(KafkaSendError);
        expect(((error as Error).cause as { retriable?: boolean }).retriable).toBe(true);
        expect(connections).toBeGreaterThan(0);
      } finally {
        await producer.close(true as never).catch(() => {});
        server.close();
      }
    },
    20_000,
  );

  // kafkajs' connection errors are retriable (send() retries them); @platformatic/kafka's
  // come as 'initProducerId failed 3 times.' holding network errors that can be retried.
  it.skipIf(client !== 'platformatic')(
    'send() retries a refused connection, as on kafkajs',
    async () => {
      const { createServer } = await import('node:net');
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const port = (closed.address() as { port: number }).port;
      await new Promise((resolve) => closed.close(resolve));
      const { Producer } = await import('@platformatic/kafka');
      const producer = new Producer({
        clientId: 'oncely-refused-test',
        bootstrapBrokers: [`127.0.0.1:${port}`],
        idempotent: true,
        acks: -1,
        // Its own retries 2: it gives up with 'initProducerId failed 3 times.' (with 0 or 1 its
        // send never settles on a refused port; timeoutMs ends those).
        retries: 2,
        retryDelay: 50,
      });
      let attempts = 0;
      const counted = new Proxy(producer, {
        get(target, name, receiver) {
          if (name === 'send') {
            return (...args: unknown[]) => {
              attempts++;
              return (target.send as (...a: unknown[]) => unknown).apply(target, args);
            };
          }
          const value = Reflect.get(target, name, receiver);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
      try {
        const error = await send(
          counted as never,
          'any',
          { id: 'refused', value: 1 },
          {
            retries: 2,
            retryDelayMs: 10,
            timeoutMs: 5000,
          },
        ).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(KafkaSendError);
        expect(attempts).toBe(3);
      } finally {
        await producer.close(true as never).catch(() => {});
      }
    },
    30_000,
  );

  it('send() maps failures to KafkaSendError', async () => {
    const { producer, close } = await producerOfClient();
    try {
      await expect(send(producer as never, 'any', [{ id: '', value: 1 }])).rejects.toBeInstanceOf(
        KafkaSendError,
      );
      const topic = uniqueName('send-limit');
      // waitForLeaders false: kafkajs' own wait fails on the UNKNOWN_TOPIC_OR_PARTITION a
      // broker answers for a topic created a moment ago (CI saw it); createTopic waits.
      await admin.createTopics({
        topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }],
        waitForLeaders: false,
      });
      await createTopic(admin, topic, 1);
      const error = await send(
        producer as never,
        topic,
        { id: 'big', value: 'x'.repeat(5000) },
        { retries: 0 },
      ).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(KafkaSendError);
      expect((error as Error).message).toMatch(/sending to '.*' failed/);
      expect(((error as Error).cause as { type?: string }).type).toBe('MESSAGE_TOO_LARGE');
    } finally {
      await close();
    }
  });

  it('the outbox producer built from broker options writes on the chosen client; a record too large fails alone', async () => {
    const topic = uniqueName('outbox-clients');
    await createTopic(admin, topic, 3);
    const tight = uniqueName('outbox-tight');
    await admin.createTopics({
      topics: [
        { topic: tight, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '3000' }] },
      ],
      waitForLeaders: false,
    });
    await createTopic(admin, tight, 1);
    const producer = createKafkaProducer({ broker: { brokers: brokers!, client } });
    try {
      const messages = [
        ...Array.from({ length: 6 }, (_, i) => outboxMessage(topic, `${topic}-${i}`, `k-${i % 2}`)),
        outboxMessage(topic, `${topic}-nokey`, undefined),
        outboxMessage(tight, `${tight}-small`, 'k'),
        outboxMessage(tight, `${tight}-big`, 'k', 'x'.repeat(5000)),
      ];
      const results = await producer.send(messages);
      expect(results.slice(0, 8)).toEqual(Array.from({ length: 8 }, () => ({ ok: true })));
      // Refused before sending: the topic's max.message.bytes was read through the client.
      expect(results[8]).toMatchObject({ ok: false, permanent: true });
      expect((results[8] as { error: Error }).error).toBeInstanceOf(KafkaSendError);
      expect((results[8] as { error: Error }).error.message).toMatch(/at most 3000 \(max.message.bytes\)/);
      const records = await readRecords(kafka, topic, 7);
      const byId = new Map(records.map((r) => [r.headers?.[MESSAGE_ID_HEADER]?.toString(), r]));
      for (let i = 0; i < 6; i++) {
        const record = byId.get(`${topic}-${i}`)!;
        expect(record.key?.toString()).toBe(`k-${i % 2}`);
        expect(record.headers?.origin?.toString()).toBe('outbox');
        expect(record.partition).toBe(javaPartition(topic, `k-${i % 2}`, 3));
      }
      expect(byId.get(`${topic}-nokey`)?.key?.toString()).toBe(`${topic}-nokey`);
    } finally {
      await producer.close();
    }
  });

  // After partitions are added, kafkajs (as Java, metadata.max.age.ms) keeps the count it
  // knew for 5 minutes; @platformatic/kafka's own default is 5 s, so for minutes one key
  // went to two partitions depending on the client (5 of 12 keys, 2 -> 8 partitions).
  it('the outbox producer keeps a key on its partition after partitions are added, as kafkajs does', async () => {
    const topic = uniqueName('outbox-grow');
    await createTopic(admin, topic, 2);
    const producer = createKafkaProducer({ broker: { brokers: brokers!, client } });
    const keys = Array.from({ length: 12 }, (_, i) => `grow-${i}`);
    const round = async (tag: string) => {
      const results = await producer.send(keys.map((key) => outboxMessage(topic, `${tag}-${key}`, key)));
      expect(results.every((r) => r.ok)).toBe(true);
    };
    try {
      await round('before');
      await admin.createPartitions({ topicPartitions: [{ topic, count: 8 }] });
      // Past @platformatic/kafka's default metadata age (5 s): the age is what is tested.
      await new Promise((resolve) => setTimeout(resolve, 6000));
      await round('after');
      const records = await readRecords(kafka, topic, keys.length * 2);
      const at = new Map(records.map((r) => [r.headers?.[MESSAGE_ID_HEADER]?.toString(), r.partition]));
      const moved = keys.filter((key) => at.get(`before-${key}`) !== at.get(`after-${key}`));
      expect(moved).toEqual([]);
    } finally {
      await producer.close();
    }
  });

  it('the outbox producer splits a batch the broker refuses and fails only the record too large', async () => {
    const topic = uniqueName('outbox-split');
    await admin.createTopics({
      topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '3000' }] }],
      waitForLeaders: false,
    });
    await createTopic(admin, topic, 1);
    // A limit above the topic's: the broker, not the packing, refuses the batch.
    const producer = createKafkaProducer({ broker: { brokers: brokers!, client }, maxMessageBytes: 100_000 });
    try {
      const results = await producer.send([
        outboxMessage(topic, `${topic}-a`, 'k'),
        outboxMessage(topic, `${topic}-big`, 'k', 'x'.repeat(5000)),
        outboxMessage(topic, `${topic}-b`, 'k'),
      ]);
      expect(results[0]).toEqual({ ok: true });
      expect(results[2]).toEqual({ ok: true });
      expect(results[1]).toMatchObject({ ok: false, permanent: true });
      expect((results[1] as { error: Error }).error.message).toMatch(/MESSAGE_TOO_LARGE/);
      // And the producer goes on: the next send on that partition is accepted.
      expect(await producer.send([outboxMessage(topic, `${topic}-c`, 'k')])).toEqual([{ ok: true }]);
      const ids = (await readRecords(kafka, topic, 3)).map((r) => r.headers?.[MESSAGE_ID_HEADER]?.toString());
      expect(ids.sort()).toEqual([`${topic}-a`, `${topic}-b`, `${topic}-c`]);
    } finally {
      await producer.close();
    }
  });

  it.runIf(client === 'platformatic')('produces without kafkajs installed (its import refused)', async () => {
    const topic = uniqueName('no-kafkajs');
    await createTopic(admin, topic, 2);
    const script = fileURLToPath(new URL('./support/produceWithoutKafkajs.mjs', import.meta.url));
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, ONCELY_TEST_BROKERS: brokers!.join(','), ONCELY_TEST_TOPIC: topic },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect({ code, output }).toMatchObject({ code: 0 });
    expect(output).toContain('kafkajs loaded: false');
    const records = await readRecords(kafka, topic, 2);
    expect(records.map((r) => r.headers?.[MESSAGE_ID_HEADER]?.toString()).sort()).toEqual([
      `${topic}-outbox`,
      `${topic}-send`,
    ]);
  });
});
