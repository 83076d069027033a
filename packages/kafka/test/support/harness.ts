/**
 * The Kafka conformance harness (contract: packages/testkit/src/harness.ts): a topic and
 * a consumer group per scenario on the test broker, the real PostgreSQL store in a
 * schema per run.
 */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { PostgresStore } from '@oncely/postgres';
import {
  type AdapterFeatures,
  type AdapterHarness,
  type HarnessSetup,
  holdOn,
  postgresStores,
  type TcpProxy,
} from '@oncely/testkit';
import { createTopic, DATABASE_URL, DeadLetterReader, groupLag, kafkaClient } from './kafka.js';

/**
 * What the Kafka adapter can do. `nativeDeadLetter`: Kafka has no dead-letter queue
 * (the adapter produces to a topic itself). `deliveryCount`: Kafka counts nothing.
 * `brokerRestart`: the harness has no restart (a broker restart is tested in
 * restart.test.ts on a broker of its own).
 */
export function kafkaFeatures(proxy: boolean): AdapterFeatures {
  return {
    redeliveryOnRetry: true,
    delayedRetry: true,
    leaseExtension: true,
    nativeDeadLetter: false,
    deliveryCount: false,
    ordering: 'partition',
    competingConsumers: true,
    serverSideDisconnect: proxy,
    brokerRestart: false,
    brokerDedup: false,
    staleAckDetectable: true,
    crossProcess: true,
    // Scenario 20 holds the proxy the consumers bootstrap through.
    connectHold: proxy,
  };
}

/**
 * The client library the adapter under test runs on: ONCELY_KAFKA_CLIENT
 * ('kafkajs' | 'platformatic'), else the adapter's default. `@platformatic/kafka` needs
 * Node >= 22.22: run the file under `npx -p node@22` (packages/kafka/README.md).
 */
export function clientUnderTest(): { client?: 'kafkajs' | 'platformatic' } {
  const client = process.env.ONCELY_KAFKA_CLIENT;
  if (client === undefined || client === '') return {};
  if (client !== 'kafkajs' && client !== 'platformatic') {
    throw new Error(`ONCELY_KAFKA_CLIENT must be 'kafkajs' or 'platformatic', got '${client}'`);
  }
  return { client };
}

/**
 * `brokers`: the direct listener. `proxy`: when given, consumers bootstrap through it
 * (so `disconnect()` can cut them); the harness's own clients stay direct.
 */
export function kafkaHarness(options: { brokers: string[]; proxy?: TcpProxy }): AdapterHarness {
  const { brokers, proxy } = options;
  const schema = `oncely_kafka_conformance_${randomBytes(4).toString('hex')}`;
  const kafka = kafkaClient(brokers, 'oncely-harness');
  const consumerBrokers = proxy ? [`127.0.0.1:${proxy.port}`] : brokers;

  return {
    brokerType: 'kafka',
    childModule: fileURLToPath(new URL('./child.mjs', import.meta.url)),
    ...postgresStores({
      connectionString: DATABASE_URL,
      schema,
      createStore: (connectionString, schema) =>
        new PostgresStore({ connectionString, schema, connectTimeoutMs: 2000 }),
    }),
    async setup({ name, leaseMs, partitions, ordered }): Promise<HarnessSetup> {
      // Clients per scenario: kafkajs keeps refreshing metadata of every topic a client
      // ever used, and fails once a previous scenario's topic is deleted.
      const admin = kafka.admin();
      const producer = kafka.producer({
        allowAutoTopicCreation: false,
        idempotent: true,
        maxInFlightRequests: 1,
      });
      await Promise.all([admin.connect(), producer.connect()]);
      const topic = `oncely-${name}`;
      const deadLetterTopic = `${topic}.dlq`;
      const groupId = `group-${name}`;
      const partitionCount = partitions ?? 4;
      await createTopic(admin, topic, partitionCount);
      await createTopic(admin, deadLetterTopic, 1);
      // The lease of a Kafka delivery is the group session (broker minimum here: 1 s).
      const sessionTimeout = Math.max(1000, leaseMs ?? 10_000);
      const reader = new DeadLetterReader(kafka, admin, deadLetterTopic);
      await reader.start();
      // Without an ordering key, records go round-robin over the partitions: concurrency
      // needs records on several partitions, and the copies of one ID then land on
      // partitions that different group members own (competing-consumer races).
      let next = 0;
      return {
        leaseMs: sessionTimeout,
        async publish(messages) {
          await producer.send({
            topic,
            acks: -1,
            messages: messages.map((m) => ({
              value: m.rawBody ?? JSON.stringify(m.body),
              headers: { ...(m.attributes ?? {}), ...(m.id === undefined ? {} : { 'message-id': m.id }) },
              ...(ordered && m.orderingKey ? { key: m.orderingKey } : { partition: next++ % partitionCount }),
            })),
          });
        },
        brokerConfig: (overrides) => ({
          type: 'kafka',
          brokers: consumerBrokers,
          topic,
          groupId,
          sessionTimeout,
          fromBeginning: true,
          maxWaitTimeInMs: 200,
          rebalanceTimeout: 30_000,
          ...clientUnderTest(),
          ...overrides,
        }),
        deadLetters: async () => (await reader.list()).map((d) => ({ id: d.id, reason: d.reason })),
        backlog: () => groupLag(admin, groupId, topic),
        ...(proxy
          ? {
              // The shared proxy, whose port the broker advertises: every connection of a
              // consumer passes it (its bootstrap and the broker connections after it).
              // requestTimeout: a request on a connection closed under a late start (part 2)
              // is given up after 5 s, not kafkajs' 30 s.
              holdConnections: async () => holdOn(proxy, { requestTimeout: 5000 }),
              async disconnect() {
                // A cut that finds no connection would test nothing.
                if (proxy.disconnect() === 0)
                  throw new Error('disconnect(): no client connection passed the proxy');
              },
            }
          : {}),
        async teardown() {
          await reader.stop();
          await admin.deleteTopics({ topics: [topic, deadLetterTopic] }).catch(() => {});
          await Promise.allSettled([admin.disconnect(), producer.disconnect()]);
        },
      };
    },
  };
}
