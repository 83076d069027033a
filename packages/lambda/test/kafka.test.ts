import { Socket } from 'node:net';
import { createTopics } from '@oncely/kafka';
import type { PostgresStore } from '@oncely/postgres';
import type { MSKEvent, MSKRecord } from 'aws-lambda';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kafkaHandler } from '../src/index.js';
import { admin, effects, openStore, postgresAvailable, uniqueSchema } from './support.js';

const hasPostgres = await postgresAvailable();
const silent = { debug() {}, info() {}, warn() {}, error() {} };
const brokers = process.env.KAFKA_BROKERS ?? '127.0.0.1:19092';

/** A broker is used only if one already answers (start one with test/emulators/kafka/start.sh). */
async function kafkaAvailable(): Promise<boolean> {
  const [host, port] = brokers.split(',')[0]!.split(':');
  const up = await new Promise<boolean>((resolve) => {
    const socket = new Socket();
    socket.setTimeout(1000);
    socket
      .once('connect', () => resolve(true))
      .once('error', () => resolve(false))
      .once('timeout', () => resolve(false));
    socket.connect(Number(port), host!);
  }).finally(() => undefined);
  if (!up && process.env.CI === 'true')
    throw new Error(`Kafka is required under CI=true (KAFKA_BROKERS=${brokers})`);
  if (!up)
    console.warn(`[oncely lambda tests] no Kafka broker at ${brokers}; the real-Kafka test is skipped`);
  return up;
}
const hasKafka = hasPostgres && (await kafkaAvailable());

/** A Kafka record exactly as the MSK / self-managed event source mapping puts it in the event. */
function mskRecord(
  topic: string,
  partition: number,
  offset: number,
  value: string,
  headers: Record<string, string>,
  key?: string,
): MSKRecord {
  return {
    topic,
    partition,
    offset,
    timestamp: 1_700_000_000_000 + offset,
    timestampType: 'CREATE_TIME',
    key: key === undefined ? (undefined as unknown as string) : Buffer.from(key).toString('base64'),
    value: Buffer.from(value).toString('base64'),
    headers: Object.entries(headers).map(([name, text]) => ({ [name]: [...Buffer.from(text)] })),
  };
}

function mskEvent(records: MSKRecord[]): MSKEvent {
  const grouped: Record<string, MSKRecord[]> = {};
  for (const record of records) {
    const key = `${record.topic}-${record.partition}`;
    grouped[key] = [...(grouped[key] ?? []), record];
  }
  return {
    eventSource: 'aws:kafka',
    eventSourceArn: 'arn:aws:kafka:us-east-1:123456789012:cluster/test/abc',
    bootstrapServers: brokers,
    records: grouped,
  };
}

describe.skipIf(!hasKafka)(
  'kafkaHandler on events built from records received from a real Kafka broker',
  () => {
    const schema = uniqueSchema('lambda_kafka');
    const topic = `lambda-${schema}`;
    let store: PostgresStore;
    const kafka = new Kafka({
      clientId: 'oncely-lambda-test',
      brokers: brokers.split(','),
      logLevel: logLevel.NOTHING,
    });
    beforeAll(async () => {
      store = await openStore('postgres', schema);
    });
    afterAll(async () => {
      await store?.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      const kafkaAdmin = kafka.admin();
      await kafkaAdmin.connect();
      await kafkaAdmin.deleteTopics({ topics: [topic] }).catch(() => {});
      await kafkaAdmin.disconnect();
    });

    it('per-record once across retried batches; a failure stops only its partition', async () => {
      const kafkaAdmin = kafka.admin();
      await kafkaAdmin.connect();
      await createTopics(kafkaAdmin, [{ topic, numPartitions: 2 }]);
      await kafkaAdmin.disconnect();
      const producer = kafka.producer();
      await producer.connect();
      const sent = Array.from({ length: 8 }, (_, i) => ({ id: `k-${i}`, partition: i % 2 }));
      await producer.send({
        topic,
        messages: sent.map(({ id, partition }) => ({
          partition,
          key: id,
          value: JSON.stringify({ id }),
          headers: { 'message-id': id },
        })),
      });
      await producer.disconnect();

      // Receive what the mapping would poll.
      const consumer = kafka.consumer({ groupId: `g-${schema}` });
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      const received: MSKRecord[] = [];
      await new Promise<void>((resolve) => {
        void consumer.run({
          eachMessage: async ({ partition, message }) => {
            const headers = Object.fromEntries(
              Object.entries(message.headers ?? {}).map(([name, value]) => [name, String(value)]),
            );
            received.push(
              mskRecord(
                topic,
                partition,
                Number(message.offset),
                message.value!.toString(),
                headers,
                message.key?.toString(),
              ),
            );
            if (received.length === sent.length) resolve();
          },
        });
      });
      await consumer.disconnect();
      received.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
      const event = mskEvent(received);

      let failures = 1;
      const fn = kafkaHandler<{ id: string }>({
        name: 'kafka-lambda',
        store,
        logger: silent,
        handler: async (message, ctx) => {
          // The second record of partition 0 fails once.
          if (message.id === 'k-2' && failures-- > 0) throw new Error('transient');
          await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, grp) VALUES ($1, $2)`, [
            message.id,
            String(message.raw && (message.raw as MSKRecord).partition),
          ]);
        },
      });
      // failureReport 'throw' (default): the mapping retries the whole batch.
      const first = await fn(event).catch((error) => error);
      expect(first).toMatchObject({ code: 'LAMBDA_BATCH_FAILED' });
      // Partition 0 stopped at k-2 (k-4, k-6 not run); partition 1 ran entirely.
      expect((await effects(store, schema)).map((r) => r.message_id)).toEqual([
        'k-0',
        'k-1',
        'k-3',
        'k-5',
        'k-7',
      ]);
      expect((first as { failed: string[] }).failed).toEqual([
        `${topic}-0-1`,
        `${topic}-0-2`,
        `${topic}-0-3`,
      ]);
      // The retried batch: committed records are duplicates, the rest run in order.
      expect(await fn(event)).toEqual({ batchItemFailures: [] });
      const rows = await effects(store, schema);
      expect(rows.map((r) => r.message_id).sort()).toEqual(sent.map((s) => s.id).sort());
      expect(rows.filter((r) => r.grp === '0').map((r) => r.message_id)).toEqual([
        'k-0',
        'k-2',
        'k-4',
        'k-6',
      ]);
    });
  },
);

describe('kafkaHandler on MSK-shaped events (PGlite)', () => {
  const schema = uniqueSchema('lambda_kafka_events');
  let store: PostgresStore;
  beforeAll(async () => {
    store = await openStore('pglite', schema);
  });
  afterAll(async () => {
    await store?.close();
  });

  it("failureReport: 'report' lists the failed record and the ones it held back as { partition, offset } (the Kafka partial batch response)", async () => {
    const seen: string[] = [];
    const fn = kafkaHandler({
      name: 'report',
      store,
      failureReport: 'report',
      idStrategy: 'broker',
      logger: silent,
      handler: async (message) => {
        if (message.id === 't/0/11') throw new Error('fails');
        seen.push(message.id);
      },
    });
    const event = mskEvent([
      mskRecord('t', 0, 10, '{}', {}),
      mskRecord('t', 0, 11, '{}', {}),
      mskRecord('t', 0, 12, '{}', {}),
      mskRecord('t', 1, 5, '{}', {}),
    ]);
    expect(await fn(event)).toEqual({
      batchItemFailures: [
        { itemIdentifier: { partition: 't-0', offset: 11 } },
        { itemIdentifier: { partition: 't-0', offset: 12 } },
      ],
    });
    expect(seen).toEqual(['t/0/10', 't/1/5']);
  });

  it("failureReport: 'report' answers the documented JSON: itemIdentifier { partition: '<topic>-<partition>', offset }", async () => {
    // The response syntax of the Kafka event source's partial batch response, as the AWS Lambda
    // documentation (kafka-retry-configurations) gives it and as Powertools for AWS Lambda
    // (Python, batch EventType.Kafka) and the Rust runtime (KafkaEventResponse) send it:
    // the partition is the key of the event's records map, the offset a number.
    const documented = JSON.parse(
      '{ "batchItemFailures": [ { "itemIdentifier": { "partition": "mytopic-0", "offset": 15 } } ] }',
    );
    const fn = kafkaHandler({
      name: 'report-documented',
      store,
      failureReport: 'report',
      idStrategy: 'broker',
      logger: silent,
      handler: async () => {
        throw new Error('fails');
      },
    });
    const response = await fn(mskEvent([mskRecord('mytopic', 0, 15, '{}', {})]));
    // What Lambda reads is the JSON the runtime serializes.
    expect(JSON.parse(JSON.stringify(response))).toEqual(documented);
  });

  it('decodes base64 values and byte-array headers into the message', async () => {
    let got: unknown;
    const fn = kafkaHandler({
      name: 'decode',
      store,
      handler: async (message) => {
        got = { id: message.id, body: message.body, key: message.orderingKey, attrs: message.attributes };
      },
    });
    await fn(
      mskEvent([
        mskRecord('orders', 3, 7, '{"amount":40}', { 'message-id': 'm-7', tenant: 'acme' }, 'order-1'),
      ]),
    );
    expect(got).toEqual({
      id: 'm-7',
      body: { amount: 40 },
      key: 'order-1',
      attrs: { 'message-id': 'm-7', tenant: 'acme' },
    });
  });
});
