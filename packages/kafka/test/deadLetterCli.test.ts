/**
 * `oncely dlq` itself (the CLI's bin, configured from the environment as an operator would)
 * on Kafka dead letters: the broker-neutral CLI reaches the Kafka session with no change,
 * lists, replays and discards, and what it did is in the store's ledger.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { deadLetterRecord } from '@oncely/kafka';
import type { Admin, Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, DATABASE_URL, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore } from './support/store.js';

const brokers = testBrokers();
const BIN = fileURLToPath(new URL('../../cli/bin/oncely.js', import.meta.url));

function oncely(args: string[], env: Record<string, string>) {
  // Without the test run's own ONCELY_ variables (ONCELY_KAFKA_CLIENT): the CLI refuses
  // an ONCELY_ variable it does not know. The client goes in as ONCELY_BROKER_CLIENT.
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith('ONCELY_')),
  );
  const child = spawn(process.execPath, [BIN, 'dlq', ...args], {
    env: { ...inherited, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  return new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
    child.once('exit', (code) => resolve({ code, out, err })),
  );
}

describe.skipIf(!brokers)('oncely dlq on Kafka (CLI bin, real Kafka + PostgreSQL)', () => {
  let kafka: Kafka;
  let admin: Admin;
  let db: TestStore;
  let passed = false;

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-dlq-cli');
    admin = kafka.admin();
    await admin.connect();
    db = await createTestStore('oncely_kafka_dlq_cli');
  });
  afterAll(async () => {
    await admin?.disconnect();
    await db?.close(passed);
  });

  it('lists, replays and discards through the environment', async () => {
    const topic = uniqueName('dlq-cli');
    await createTopic(admin, topic, 2);
    await createTopic(admin, `${topic}.dlq`, 2);
    const consumer = 'dlq-cli';
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      await producer.send({
        topic: `${topic}.dlq`,
        acks: -1,
        messages: [0, 1, 2, 3].map((i) => {
          const poison = i % 2 === 0;
          return deadLetterRecord({
            topic,
            partition: i % 2,
            message: {
              key: Buffer.from(`k-${i}`),
              value: Buffer.from(poison ? `{broken ${i}` : `{"n":${i}}`),
              headers: { 'message-id': `m-${i}` },
              offset: String(i),
              timestamp: String(Date.now()),
              attributes: 0,
            },
            consumer,
            reason: poison ? 'invalid-body' : 'max-attempts',
            detail: poison ? `Unexpected token b at position ${i}` : 'timeout',
          });
        }),
      });
    } finally {
      await producer.disconnect();
    }
    const env = {
      DATABASE_URL,
      ONCELY_BROKER_TYPE: 'kafka',
      ONCELY_BROKER_BROKERS: brokers!.join(','),
      ONCELY_BROKER_TOPIC: topic,
      ...(clientUnderTest().client ? { ONCELY_BROKER_CLIENT: clientUnderTest().client! } : {}),
      ONCELY_OPERATOR: 'alice',
    };
    const schema = ['--schema', db.schema];

    const listed = await oncely(['list', consumer, '--json', ...schema], env);
    expect(listed, listed.err).toMatchObject({ code: 0 });
    const { groups } = JSON.parse(listed.out) as { groups: Array<{ reason: string; count: number }> };
    expect(groups.map((g) => [g.reason, g.count]).sort()).toEqual([
      ['invalid-body', 2],
      ['max-attempts', 2],
    ]);

    const replayed = await oncely(['replay', consumer, '--group', 'max-attempts', ...schema], env);
    expect(replayed, replayed.err).toMatchObject({ code: 0 });
    expect(replayed.out).toContain('replayed 2 not yet processed: m-1, m-3');
    // The copies went back to the partitions they came from, marked.
    const ends = await admin.fetchTopicOffsets(topic);
    expect(ends.map((p) => `${p.partition}:${p.high}`).sort()).toEqual(['0:0', '1:2']);

    const discarded = await oncely(['discard', consumer, '--group', 'invalid-body', '--yes', ...schema], env);
    expect(discarded, discarded.err).toMatchObject({ code: 0 });
    expect(discarded.out).toContain('discarded 2 (recorded as by alice)');

    const empty = await oncely(['list', consumer, '--json', ...schema], env);
    expect(empty, empty.err).toMatchObject({ code: 0 });
    expect(JSON.parse(empty.out)).toMatchObject({ groups: [] });
    const { rows } = await db.store.transaction((tx) =>
      tx.query<{ state: string; message_id: string }>(
        `SELECT state, message_id FROM "${db.schema}".dead_letter_ledger WHERE consumer = $1 ORDER BY message_id`,
        [consumer],
      ),
    );
    expect(rows.map((r) => `${r.message_id}:${r.state}`)).toEqual([
      'm-0:discarded',
      'm-1:replayed',
      'm-2:discarded',
      'm-3:replayed',
    ]);
    passed = true;
  }, 120_000);
});
