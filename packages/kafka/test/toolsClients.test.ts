/**
 * The tools on the client library under test (ONCELY_KAFKA_CLIENT, see
 * support/harness.ts), on the real broker: findDeadLetters (`oncely inspect`) and diagnose
 * (`oncely doctor`) with `broker.client` run on that client and answer the same on both,
 * and createTopics takes that client's admin.
 * On platformatic, a child process that cannot load kafkajs runs both too.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createTopics, deadLetterRecord, diagnose, findDeadLetters } from '@oncely/kafka';
import { type Admin, ConfigResourceTypes, type Kafka, type KafkaMessage } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';

// Idempotent: kafkajs retries a whole produce request when one partition of it fails (a
// partition of a topic created a moment ago without its leader yet), and without it the
// partitions that had succeeded are written twice: CI saw a third copy of a two-copy seed.
const IDEMPOTENT = { idempotent: true, maxInFlightRequests: 1 };

const brokers = testBrokers();
const client = clientUnderTest().client ?? 'kafkajs';

function original(id: string, offset: string): KafkaMessage {
  return {
    key: null,
    value: Buffer.from('{}'),
    headers: { 'message-id': id },
    offset,
    timestamp: String(Date.now()),
    attributes: 0,
  } as KafkaMessage;
}

/** A topic of 2 partitions with 3 records, and a dead-letter topic with 2 of this consumer's and 1 of another's. */
async function seed(kafka: Kafka, admin: Admin, topic: string, consumer: string): Promise<void> {
  await createTopic(admin, topic, 2);
  await createTopic(admin, `${topic}.dlq`, 2);
  const producer = kafka.producer(IDEMPOTENT);
  await producer.connect();
  try {
    await producer.send({
      topic,
      messages: [0, 1, 2].map((i) => ({ value: `r${i}`, partition: i % 2 })),
    });
    const letter = (id: string, offset: string, by: string, partition: number) => ({
      ...deadLetterRecord({
        topic,
        partition,
        message: original(id, offset),
        consumer: by,
        reason: 'max-attempts',
        detail: `failed ${id}`,
      }),
      partition,
    });
    await producer.send({
      topic: `${topic}.dlq`,
      messages: [
        letter('order-42', '0', consumer, 0),
        letter('order-42', '5', consumer, 1),
        letter('order-42', '1', 'someone-else', 1),
        letter('order-7', '2', consumer, 0),
      ],
    });
  } finally {
    await producer.disconnect();
  }
}

/** An admin of the client under test, and how to close it. */
async function adminOfClient(): Promise<{ clientAdmin: unknown; close(): Promise<void> }> {
  if (client === 'platformatic') {
    const { Admin } = await import('@platformatic/kafka');
    const clientAdmin = new Admin({ clientId: 'oncely-tools-clients-test', bootstrapBrokers: brokers! });
    return { clientAdmin, close: () => clientAdmin.close() };
  }
  const clientAdmin = kafkaClient(brokers!).admin();
  await clientAdmin.connect();
  return { clientAdmin, close: () => clientAdmin.disconnect() };
}

describe.skipIf(!brokers)(`kafka tools on ${client}`, () => {
  let kafka: Kafka;
  let admin: Admin;

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-tools-clients-test');
    admin = kafka.admin();
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.disconnect();
  });

  it('findDeadLetters finds this consumer copies of the ID, and diagnose reports the topics and lag', async () => {
    const topic = uniqueName('tools');
    const name = `c-${topic}`;
    await seed(kafka, admin, topic, name);
    const config = {
      name,
      broker: { type: 'kafka', brokers: brokers!, topic, client },
      handler: async () => {},
    };
    const copies = await findDeadLetters(config as never, 'order-42');
    expect(copies.map((c) => c.description).sort()).toEqual(['failed order-42', 'failed order-42']);
    expect(copies[0]).toMatchObject({ reason: 'max-attempts' });
    expect(copies[0]!.enqueuedAt).toBeInstanceOf(Date);
    // Read without consuming, and its throwaway group is gone.
    expect(await findDeadLetters(config as never, 'order-42')).toHaveLength(2);
    expect(await findDeadLetters(config as never, 'absent')).toEqual([]);
    const groups = (await admin.listGroups()).groups.map((g) => g.groupId);
    expect(groups.filter((g) => g.startsWith(`${name}-inspect-`))).toEqual([]);

    // A compacted dead-letter topic that keeps a day: oncely dlq could lose letters.
    await admin.alterConfigs({
      validateOnly: false,
      resources: [
        {
          type: ConfigResourceTypes.TOPIC,
          name: `${topic}.dlq`,
          configEntries: [
            { name: 'cleanup.policy', value: 'compact,delete' },
            { name: 'retention.ms', value: String(24 * 3600 * 1000) },
          ],
        },
      ],
    });
    const report = await diagnose({ ...config, concurrency: 4 } as never);
    const messages = report.findings.map((f) => `${f.level}: ${f.message}`);
    expect(messages).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^ok: cluster answers: 1 broker\(s\), controller \d+$/),
        `ok: topic '${topic}' has 2 partition(s)`,
        expect.stringMatching(/^warn: only 2 partition\(s\)/),
        `ok: group '${name}' lag: 3 record(s)`,
        `ok: dead-letter topic '${topic}.dlq' exists`,
        expect.stringMatching(/^warn: dead-letter topic .* is compacted \(cleanup\.policy compact,delete\)/),
        expect.stringMatching(/^warn: dead-letter topic .* keeps records 24 h \(retention\.ms\)/),
      ]),
    );
    expect(report.findings.filter((f) => f.level === 'error')).toEqual([]);

    const missing = await diagnose({
      ...config,
      broker: { ...config.broker, topic: `${topic}-absent` },
    } as never);
    expect(missing.findings.map((f) => f.message)).toEqual(
      expect.arrayContaining([`topic '${topic}-absent' does not exist`]),
    );
  });

  it("createTopics with the client's admin: partitions, configs, leaders; false when they exist", async () => {
    const [first, second] = [uniqueName('create-a'), uniqueName('create-b')];
    const { clientAdmin, close } = await adminOfClient();
    try {
      const topics = [
        { topic: first, numPartitions: 3 },
        { topic: second, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '4000' }] },
      ];
      expect(await createTopics(clientAdmin as never, topics)).toBe(true);
      // Created again, twice at once (another member at the same moment): they exist.
      expect(
        await Promise.all([
          createTopics(clientAdmin as never, topics),
          createTopics(clientAdmin as never, topics),
        ]),
      ).toEqual([false, false]);
    } finally {
      await close();
    }
    const metadata = await admin.fetchTopicMetadata({ topics: [first, second] });
    const described = metadata.topics.map((t) => [
      t.name,
      t.partitions.length,
      t.partitions.every((p) => p.leader >= 0),
    ]);
    expect(described.sort()).toEqual(
      [
        [first, 3, true],
        [second, 1, true],
      ].sort(),
    );
    const { resources } = await admin.describeConfigs({
      resources: [{ type: 2, name: second, configNames: ['max.message.bytes'] }],
      includeSynonyms: false,
    });
    expect(resources[0]?.configEntries[0]?.configValue).toBe('4000');
  });

  it.runIf(client === 'platformatic')('runs without kafkajs installed (its import refused)', async () => {
    const topic = uniqueName('tools-no-kafkajs');
    const name = `c-${topic}`;
    await seed(kafka, admin, topic, name);
    const script = fileURLToPath(new URL('./support/toolsWithoutKafkajs.mjs', import.meta.url));
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, ONCELY_TEST_BROKERS: brokers!.join(','), ONCELY_TEST_TOPIC: topic },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect({ code, output }).toMatchObject({ code: 0 });
    expect(output).toContain('copies: 2');
    expect(output).toContain(`lag: 3 record(s)`);
    expect(output).toContain('kafkajs loaded: false');
  });
});
