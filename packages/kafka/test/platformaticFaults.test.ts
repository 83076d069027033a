/**
 * Promises of the README that adapter.test.ts checks on kafkajs, on @platformatic/kafka
 * (this file runs only with ONCELY_KAFKA_CLIENT=platformatic, on Node 22: scripts/test.sh):
 * - `start()` fails with KafkaTopicMissingError (BROKER_MISCONFIGURED) naming a missing
 *   topic (its admin reports a missing topic as a UserError 'Unknown topic', without the
 *   Kafka error name);
 * - while the dead-letter topic cannot be written, the partition waits and the failure is
 *   reported (its producer retried a send to a missing topic without end: the dead letter
 *   never failed, nothing was reported, the handler's slot stayed taken).
 */
import type { Consumer } from '@oncely/core';
import { isOncelyError, silentLogger } from '@oncely/core';
import { createKafkaConsumer } from '@oncely/kafka';
import { ConsumerSpy } from '@oncely/testkit';
import type { Admin, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, groupLag, kafkaClient, publish, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();
const platformatic = clientUnderTest().client === 'platformatic';

describe.skipIf(!brokers || !platformatic)('@platformatic/kafka: a missing topic', () => {
  let admin: Admin;
  let producer: Producer;
  let db: TestStore;
  let passed = true;
  const running: Consumer<any>[] = [];

  beforeAll(async () => {
    const kafka = kafkaClient(brokers!, 'oncely-platformatic-faults-test');
    admin = kafka.admin();
    producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    await Promise.all([admin.connect(), producer.connect()]);
    db = await createTestStore('oncely_kafka_plat_faults');
  });

  afterAll(async () => {
    for (const c of running) await c.stop().catch(() => {});
    await Promise.allSettled([admin?.disconnect(), producer?.disconnect()]);
    await db?.close(passed);
  });

  it('start() fails with BROKER_MISCONFIGURED, naming the missing topic', async () => {
    const topic = uniqueName('missing');
    const c = createKafkaConsumer({
      name: uniqueName('missing-consumer'),
      broker: { brokers: brokers!, topic, ...clientUnderTest() },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    const error = await c.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(String(error)).toContain(topic);
    expect(isOncelyError(error, 'BROKER_MISCONFIGURED'), String(error)).toBe(true);
  });

  it('a dead-letter topic that is gone: the partition waits, the failed dead letter is reported, then written', async () => {
    try {
      const topic = uniqueName('dlq-gone');
      const name = uniqueName('dlq-gone-consumer');
      const deadLetterTopic = `${topic}.dlq`;
      await createTopic(admin, topic, 1);
      const handled: string[] = [];
      const c = createKafkaConsumer({
        name,
        broker: {
          brokers: brokers!,
          topic,
          deadLetterTopic,
          fromBeginning: true,
          maxWaitTimeInMs: 200,
          sessionTimeout: 6000,
          // Bounds each dead-letter send: the failure comes within it.
          requestTimeout: 3000,
          ...clientUnderTest(),
        },
        store: db.store,
        concurrency: 2,
        maxAttempts: 1,
        logger: silentLogger,
        backoff: { initialMs: 50, maxMs: 500, jitter: 0 },
        handler: async (message, ctx) => {
          handled.push(message.id);
          if (message.id === 'poison') throw new Error('always fails');
          await db.insertEffect(ctx.tx, { id: message.id, consumer: name });
        },
      });
      running.push(c);
      const spy = new ConsumerSpy().attach(c, 'c');
      await c.start();
      await admin.deleteTopics({ topics: [deadLetterTopic] });
      await publish(producer, topic, [
        { id: 'before', body: {} },
        { id: 'poison', body: {} },
        { id: 'after', body: {} },
      ]);
      await spy.waitFor('ackFailed', (e) => e.event.messageId === 'poison', 20_000);
      expect(spy.count('deadLettered'), 'dead letters confirmed').toBe(0);
      expect(handled, 'records after the poison one while its dead letter is not written').not.toContain(
        'after',
      );
      await createTopic(admin, deadLetterTopic, 1);
      await spy.waitFor('deadLettered', (e) => e.event.messageId === 'poison', 30_000);
      await until('the group to commit everything', async () => (await groupLag(admin, name, topic)) === 0);
      const counts = await db.effectCounts();
      expect([counts.get('before'), counts.get('after'), counts.get('poison')]).toEqual([1, 1, undefined]);
    } catch (error) {
      passed = false;
      throw error;
    }
  }, 90_000);
});
