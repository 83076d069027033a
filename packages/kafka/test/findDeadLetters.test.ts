/**
 * findDeadLetters (what `oncely inspect` asks for a message without a marker) on the real
 * broker: it finds the copies this consumer dead-lettered, reads without consuming (a
 * second call sees the same), leaves out another consumer's dead letters, and resolves
 * the ID as the consumer did, the 'broker' strategy on the record's original coordinates.
 */
import { silentLogger } from '@oncely/core';
import { createKafkaConsumer, deadLetterRecord, findDeadLetters, send } from '@oncely/kafka';
import type { Admin, Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTopic, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

// Idempotent: kafkajs retries a whole produce request when one partition of it fails (a
// partition of a topic created a moment ago without its leader yet), and without it the
// partitions that had succeeded are written twice: CI saw a third copy of a two-copy seed.
const IDEMPOTENT = { idempotent: true, maxInFlightRequests: 1 };

const brokers = testBrokers();

describe.skipIf(!brokers)('findDeadLetters on a real broker', () => {
  let kafka: Kafka;
  let admin: Admin;
  let db: TestStore;
  let passed = true;

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-find-dead-letters');
    admin = kafka.admin();
    await admin.connect();
    db = await createTestStore('oncely_kafka_find_dlq');
  });
  afterAll(async () => {
    await admin?.disconnect();
    await db?.close(passed);
  });

  it('finds what this consumer dead-lettered, without consuming it, and nothing of another consumer', async () => {
    try {
      const topic = uniqueName('find-dlq');
      await createTopic(admin, topic, 2);
      const name = `c-${topic}`;
      const broker = {
        brokers: brokers!,
        topic,
        fromBeginning: true,
        maxWaitTimeInMs: 200,
        sessionTimeout: 6000,
      };
      const consumer = createKafkaConsumer({
        name,
        broker,
        store: db.store,
        maxAttempts: 1,
        logger: silentLogger,
        handler: async (message) => {
          if (message.id === 'order-42') throw new Error('card declined');
        },
      });
      let deadLettered = 0;
      consumer.on('deadLettered', () => deadLettered++);
      await consumer.start();
      const producer = kafka.producer(IDEMPOTENT);
      await producer.connect();
      try {
        await send(producer, topic, [
          { id: 'order-41', value: '{}' },
          { id: 'order-42', value: '{}' },
        ]);
        await until('order-42 dead-lettered', () => deadLettered === 1, 60_000);
        await consumer.stop();
        // Another consumer's dead letter of the same ID, in the same topic.
        await producer.send({
          topic: `${topic}.dlq`,
          messages: [
            deadLetterRecord({
              topic,
              partition: 0,
              message: {
                key: null,
                value: Buffer.from('{}'),
                headers: { 'message-id': 'order-42' },
                offset: '0',
                timestamp: String(Date.now()),
                attributes: 0,
              },
              consumer: 'someone-else',
              reason: 'invalid-body',
              detail: 'not this consumer',
            }),
          ],
        });
      } finally {
        await producer.disconnect();
      }
      const config = {
        name,
        broker: { type: 'kafka' as const, ...broker },
        store: db.store,
        handler: async () => {},
      };
      const copies = await findDeadLetters(config, 'order-42');
      expect(copies).toHaveLength(1);
      expect(copies[0]).toMatchObject({ reason: 'max-attempts' });
      expect(copies[0]!.description).toContain('card declined');
      expect(copies[0]!.enqueuedAt).toBeInstanceOf(Date);
      // Read, not consumed: the same answer again; a message never dead-lettered has none.
      expect(await findDeadLetters(config, 'order-42')).toEqual(copies);
      expect(await findDeadLetters(config, 'order-41')).toEqual([]);
      // The throwaway groups are gone.
      const groups = (await admin.listGroups()).groups.map((g) => g.groupId);
      expect(groups.filter((g) => g.startsWith(`${name}-inspect-`))).toEqual([]);
    } catch (error) {
      passed = false;
      throw error;
    }
  }, 120_000);

  it("resolves the 'broker' ID strategy on the record's original topic, partition and offset", async () => {
    const topic = uniqueName('find-dlq-broker');
    await createTopic(admin, `${topic}.dlq`, 1);
    const producer = kafka.producer(IDEMPOTENT);
    await producer.connect();
    try {
      await producer.send({
        topic: `${topic}.dlq`,
        messages: [
          deadLetterRecord({
            topic,
            partition: 2,
            message: {
              key: null,
              value: null,
              headers: {},
              offset: '17',
              timestamp: '0',
              attributes: 0,
            },
            consumer: 'by-offset',
            reason: 'max-attempts',
            detail: 'boom',
          }),
        ],
      });
    } finally {
      await producer.disconnect();
    }
    const config = {
      name: 'by-offset',
      broker: { type: 'kafka' as const, brokers: brokers!, topic },
      idStrategy: 'broker' as const,
      store: db.store,
      handler: async () => {},
    };
    expect(await findDeadLetters(config, `${topic}/2/17`)).toMatchObject([{ reason: 'max-attempts' }]);
    expect(await findDeadLetters(config, `${topic}/2/18`)).toEqual([]);
    // No dead-letter topic at all: nothing, not an error.
    expect(
      await findDeadLetters({ ...config, broker: { ...config.broker, topic: uniqueName('none') } }, 'x'),
    ).toEqual([]);
  }, 120_000);
});
