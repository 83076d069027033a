/**
 * Your own @platformatic/kafka setup (`broker.platformatic`: factories of Consumer,
 * Producer and Admin), on the real broker. The factories here build real clients, add the
 * bootstrap brokers themselves (the `broker` section has none) and keep what they made,
 * so each test sees which clients the adapter, the dead-letter producer, `send`'s outbox
 * producer and the tools used, and that it closed them all. Needs Node >= 22.22:
 * vitest.config.ts leaves this file out on an older Node; it runs in the test command's
 * Node 22 job. (The refusals that need no broker are in config.test.ts.)
 */
import { ConfigError, type Message, silentLogger } from '@oncely/core';
import {
  createKafkaConsumer,
  createKafkaProducer,
  diagnose,
  findDeadLetters,
  type PlatformaticClientFactories,
} from '@oncely/kafka';
import { Admin, Consumer, Producer } from '@platformatic/kafka';
import type { Admin as KafkajsAdmin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTopic, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();

/** Real factories that keep every client they made, with its kind and the options asked for. */
function recordingFactories(bootstrapBrokers: string[]) {
  const made: Array<{ kind: string; clientId: string; groupId?: string; client: { closed: boolean } }> = [];
  const keep = <T extends { closed: boolean; clientId: string }>(
    kind: string,
    client: T,
    groupId?: string,
  ): T => {
    made.push({ kind, clientId: client.clientId, groupId, client });
    return client;
  };
  const factories = {
    consumer: (options) => keep('consumer', new Consumer({ ...options, bootstrapBrokers }), options.groupId),
    producer: (options) => keep('producer', new Producer({ ...options, bootstrapBrokers })),
    admin: (options) => keep('admin', new Admin({ ...options, bootstrapBrokers })),
  } satisfies PlatformaticClientFactories;
  return { factories, made };
}

describe.skipIf(!brokers)('broker.platformatic: your own @platformatic/kafka factories (real broker)', () => {
  let admin: KafkajsAdmin;
  let db: TestStore;
  const passed = true;

  beforeAll(async () => {
    admin = kafkaClient(brokers!, 'oncely-platformatic-injected').admin();
    await admin.connect();
    db = await createTestStore('oncely_kafka_injected');
  });

  afterAll(async () => {
    await admin?.disconnect();
    await db?.close(passed);
  });

  it('the consumer, its dead-letter producer, the outbox producer and the tools use the factories, and close what they made', async () => {
    const topic = uniqueName('injected');
    const name = uniqueName('injected-consumer');
    await createTopic(admin, topic, 2);
    await createTopic(admin, `${topic}.dlq`, 2);
    const { factories, made } = recordingFactories(brokers!);
    // No `brokers` and no `client`: the factories give both.
    const broker = { type: 'kafka' as const, topic, platformatic: factories };
    const consumer = createKafkaConsumer({
      name,
      broker: { ...broker, fromBeginning: true, maxWaitTimeInMs: 200, sessionTimeout: 6000 },
      store: db.store,
      concurrency: 2,
      logger: silentLogger,
      maxAttempts: 1,
      handler: async (message: Message<{ n: number; poison?: boolean }>, ctx) => {
        if (message.body.poison) throw new Error('poison');
        await db.insertEffect(ctx.tx, { id: message.id, consumer: name });
      },
    });
    // The outbox producer from the same `broker` section writes the records.
    const outbox = createKafkaProducer({ broker: { platformatic: factories } });
    try {
      await consumer.start();
      const sent = await outbox.send(
        Array.from({ length: 6 }, (_, n) => ({
          id: `m-${n}`,
          destination: topic,
          body: Buffer.from(JSON.stringify(n === 5 ? { n, poison: true } : { n })),
          key: `k-${n}`,
          attributes: {},
          attempt: 1,
        })),
      );
      expect(sent.every((result) => result.ok)).toBe(true);
      await until('five effect rows', async () => (await db.effectCounts()).size === 5);
      // The poison record reached the dead-letter topic through the adapter's own producer.
      const tools = { name, broker, store: db.store, handler: async () => {} };
      await until(
        'm-5 dead-lettered',
        async () => (await findDeadLetters(tools, 'm-5')).length === 1,
        60_000,
      );
      const report = await diagnose(tools);
      expect(report.findings.filter((f) => f.level === 'error')).toEqual([]);
    } finally {
      await consumer.stop();
      await outbox.close();
    }
    const kinds = (kind: string) => made.filter((m) => m.kind === kind);
    // The group member (of the consumer's group) and the tools' scans (groups of their own).
    expect(kinds('consumer').some((m) => m.groupId === name)).toBe(true);
    expect(kinds('consumer').some((m) => m.groupId !== name)).toBe(true);
    // The dead-letter producer and the outbox producer.
    expect(kinds('producer').length).toBeGreaterThanOrEqual(2);
    expect(kinds('admin').length).toBeGreaterThanOrEqual(1);
    // The adapter's client IDs, from the consumer's name, reached the factories.
    expect(made.some((m) => m.clientId.startsWith(`oncely-${name}`))).toBe(true);
    expect(made.filter((m) => !m.client.closed).map((m) => `${m.kind} ${m.clientId}`)).toEqual([]);
    expect((await db.effectCounts()).get('m-0')).toBe(1);
  });

  it('a factory that returns another kind of client, or a consumer of another group, fails start() with a ConfigError', async () => {
    const topic = uniqueName('injected-bad');
    await createTopic(admin, topic, 1);
    await createTopic(admin, `${topic}.dlq`, 1);
    const { factories } = recordingFactories(brokers!);
    const made: Array<{ close(): Promise<void> }> = [];
    const cases: Array<[PlatformaticClientFactories, RegExp]> = [
      [
        {
          ...factories,
          consumer: (options) => {
            const wrong = new Producer({ ...options, bootstrapBrokers: brokers! });
            made.push(wrong);
            return wrong;
          },
        },
        /broker\.platformatic\.consumer must return a new @platformatic\/kafka Consumer.*got a @platformatic\/kafka producer/,
      ],
      [
        {
          ...factories,
          consumer: (options) => {
            const other = new Consumer({ ...options, groupId: 'someone-else', bootstrapBrokers: brokers! });
            made.push(other);
            return other;
          },
        },
        /broker\.platformatic\.consumer returned a consumer of group "someone-else"/,
      ],
      [
        { ...factories, admin: () => kafkaClient(brokers!).admin() },
        /broker\.platformatic\.admin must return/,
      ],
    ];
    for (const [platformatic, message] of cases) {
      const consumer = createKafkaConsumer({
        name: uniqueName('injected-bad-consumer'),
        broker: { type: 'kafka', topic, platformatic, sessionTimeout: 6000 },
        store: db.store,
        logger: silentLogger,
        handler: async () => {},
      });
      const started = consumer.start();
      await expect(started).rejects.toThrow(message);
      await expect(started).rejects.toBeInstanceOf(ConfigError);
      await consumer.stop().catch(() => {});
    }
    await Promise.all(made.map((client) => client.close()));
  });
});
