/**
 * The batch path (issue #15, goal 3): with the consumer's `batch` option a partition's
 * records are claimed and committed together in one transaction, offsets committed
 * after; a record that fails holds back the records after it in its partition (they are
 * released, not committed ahead of its retry), other partitions go on.
 */
import {
  type Consumer,
  type ConsumerConfig,
  type ConsumerEvent,
  isOncelyError,
  type Message,
  type SqlClient,
  silentLogger,
} from '@oncely/core';
import { createKafkaConsumer, type KafkaBrokerOptions } from '@oncely/kafka';
import type { Admin, Kafka, Producer } from 'kafkajs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTopic,
  DeadLetterReader,
  groupLag,
  kafkaClient,
  publish,
  testBrokers,
  uniqueName,
} from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();

describe('kafka batch config', () => {
  // The batch path claims message IDs; offsets mode stores offsets instead, one
  // transaction per record. Together they are refused rather than silently half-applied.
  it("refuses batch with mode 'offsets' (CONFIG_INVALID)", () => {
    const create = () =>
      createKafkaConsumer({
        name: 'orders',
        broker: { brokers: ['127.0.0.1:9092'], topic: 'orders' },
        store: {} as never,
        handler: async () => {},
        mode: 'offsets',
        concurrency: 10,
        batch: { size: 10 },
      });
    let error: unknown;
    try {
      create();
    } catch (caught) {
      error = caught;
    }
    expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toMatch(/batch.*'transactional' mode only/);
  });
});

describe.skipIf(!brokers)('kafka batch path on a real broker', () => {
  let kafka: Kafka;
  let admin: Admin;
  let producer: Producer;
  let db: TestStore;
  let passed = true;
  const running: Consumer<any>[] = [];

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-batch-test');
    admin = kafka.admin();
    producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    await Promise.all([admin.connect(), producer.connect()]);
    db = await createTestStore('oncely_kafka_batch');
    // Effects with the transaction that wrote them: how many transactions the records took.
    await db.store.transaction(async (tx) => {
      await tx.query(
        `CREATE TABLE "${db.schema}".batch_effects (seq bigserial PRIMARY KEY, consumer text NOT NULL,
           message_id text NOT NULL, partition integer NOT NULL, record_offset bigint NOT NULL,
           attempt integer NOT NULL, xid bigint NOT NULL DEFAULT txid_current())`,
      );
    });
  });

  afterEach(async (context) => {
    if (context.task.result?.state === 'fail') passed = false;
    await Promise.allSettled(running.splice(0).map((c) => c.stop()));
  });

  afterAll(async () => {
    await Promise.allSettled([admin?.disconnect(), producer?.disconnect()]);
    await db?.close(passed);
  });

  interface Effect {
    message_id: string;
    partition: number;
    record_offset: string;
    attempt: number;
    xid: string;
  }

  async function effects(name: string): Promise<Effect[]> {
    return db.store.transaction(
      async (tx) =>
        (
          await tx.query<Effect>(
            `SELECT message_id, partition, record_offset, attempt, xid FROM "${db.schema}".batch_effects
               WHERE consumer = $1 ORDER BY seq`,
            [name],
          )
        ).rows,
    );
  }

  /** One effect row in the handler's transaction, with the record's place and attempt. */
  async function insertEffect(name: string, message: Message<any>, tx: SqlClient): Promise<void> {
    const raw = message.raw as { partition: number; message: { offset: string } };
    await tx.query(
      `INSERT INTO "${db.schema}".batch_effects (consumer, message_id, partition, record_offset, attempt)
         VALUES ($1, $2, $3, $4, $5)`,
      [name, message.id, raw.partition, raw.message.offset, message.deliveryAttempt],
    );
  }

  function consumer(
    name: string,
    broker: Omit<KafkaBrokerOptions, 'brokers'>,
    options: Partial<Omit<ConsumerConfig<any>, 'broker' | 'name'>>,
  ): Consumer<any> {
    const c = createKafkaConsumer({
      name,
      broker: {
        brokers: brokers!,
        fromBeginning: true,
        maxWaitTimeInMs: 200,
        sessionTimeout: 6000,
        ...broker,
      },
      store: db.store,
      concurrency: 20,
      batch: { size: 20 },
      logger: silentLogger,
      backoff: { initialMs: 50, maxMs: 500, jitter: 0 },
      handler: (message, ctx) => insertEffect(name, message, ctx.tx),
      ...options,
    });
    running.push(c);
    return c;
  }

  it("commits a partition's records together: every effect once, far fewer transactions, offsets to the end", async () => {
    const topic = uniqueName('batch');
    const name = uniqueName('batch-consumer');
    await createTopic(admin, topic, 3);
    const count = 180;
    await publish(
      producer,
      topic,
      Array.from({ length: count }, (_, n) => ({ id: `b-${n}`, body: { n }, partition: n % 3 })),
    );
    // Slots for a full window of every partition at once.
    const c = consumer(name, { topic }, { concurrency: 60 });
    await c.start();
    await until('the group to commit everything', async () => (await groupLag(admin, name, topic)) === 0);
    const rows = await effects(name);
    expect(rows).toHaveLength(count);
    expect(new Set(rows.map((r) => r.message_id)).size, 'each record applied once').toBe(count);
    const transactions = new Set(rows.map((r) => r.xid)).size;
    // One record per transaction is what the path without batching does: 180. With
    // windows of up to 20 records of a partition, 9 when every fetch is full.
    expect(transactions, 'transactions that applied the records').toBeLessThanOrEqual(count / 4);
    // Within each partition the effects are in offset order.
    for (const partition of [0, 1, 2]) {
      const offsets = rows.filter((r) => r.partition === partition).map((r) => Number(r.record_offset));
      expect(offsets).toEqual(offsets.slice().sort((a, b) => a - b));
    }
  });

  it('a record failing in the middle of a batch: those after it in its partition are released and commit after it, in order', async () => {
    const topic = uniqueName('batch-order');
    const name = uniqueName('batch-order-consumer');
    await createTopic(admin, topic, 2);
    const perPartition = 30;
    await publish(
      producer,
      topic,
      Array.from({ length: perPartition * 2 }, (_, n) => ({
        id: `p${n % 2}-${Math.floor(n / 2)}`,
        body: { n },
        partition: n % 2,
      })),
    );
    const failing = 'p0-10';
    const released: ConsumerEvent[] = [];
    const failedEvents: ConsumerEvent[] = [];
    const c = consumer(
      name,
      { topic },
      {
        // Slots for a full window of both partitions: p0-10 sits in the middle of its batch.
        concurrency: 60,
        handler: async (message, ctx) => {
          await insertEffect(name, message, ctx.tx);
          // Its first attempt fails (in both runs the batch makes of it), its second goes through.
          if (message.id === failing && message.deliveryAttempt === 1) throw new Error('fails once');
        },
      },
    );
    c.on('released', (event) => released.push(event));
    c.on('failed', (event) => failedEvents.push(event));
    await c.start();
    await until('the group to commit everything', async () => (await groupLag(admin, name, topic)) === 0);
    const rows = await effects(name);
    expect(rows).toHaveLength(perPartition * 2);
    expect(new Set(rows.map((r) => r.message_id)).size, 'each record applied once').toBe(perPartition * 2);
    for (const partition of [0, 1]) {
      const offsets = rows.filter((r) => r.partition === partition).map((r) => Number(r.record_offset));
      expect(offsets, `partition ${partition} committed in offset order`).toEqual(
        Array.from({ length: perPartition }, (_, i) => i),
      );
    }
    expect(failedEvents.map((e) => e.messageId)).toEqual([failing]);
    // The records behind it in its batch were given back, and only those.
    const releasedIds = new Set(released.map((e) => e.messageId));
    expect(releasedIds.size).toBeGreaterThan(0);
    for (const id of releasedIds) {
      expect(id).toMatch(/^p0-/);
      expect(Number(id!.slice(3))).toBeGreaterThan(10);
    }
    // A release is no attempt: the failed record runs a second time, the others commit at their first.
    const attempts = new Map(rows.map((r) => [r.message_id, r.attempt]));
    expect(attempts.get(failing)).toBe(2);
    expect([...attempts].filter(([id, attempt]) => id !== failing && attempt !== 1)).toEqual([]);
  });

  it('a record of a batch that keeps failing is dead-lettered to <topic>.dlq, then the partition goes on in order', async () => {
    const topic = uniqueName('batch-dlq');
    const name = uniqueName('batch-dlq-consumer');
    await createTopic(admin, topic, 1);
    await publish(
      producer,
      topic,
      Array.from({ length: 20 }, (_, n) => ({ id: `d-${n}`, body: { n }, partition: 0 })),
    );
    const poison = 'd-5';
    const reader = new DeadLetterReader(kafka, admin, `${topic}.dlq`);
    const c = consumer(
      name,
      { topic },
      {
        maxAttempts: 2,
        handler: async (message, ctx) => {
          await insertEffect(name, message, ctx.tx);
          if (message.id === poison) throw new Error('poison');
        },
      },
    );
    await c.start();
    await reader.start();
    try {
      await until('the group to commit everything', async () => (await groupLag(admin, name, topic)) === 0);
      expect(await reader.list()).toEqual([
        expect.objectContaining({ id: poison, reason: 'max-attempts', originalOffset: '5' }),
      ]);
      const offsets = (await effects(name)).map((r) => Number(r.record_offset));
      expect(offsets, 'every record but the poison, in offset order').toEqual(
        Array.from({ length: 20 }, (_, i) => i).filter((i) => i !== 5),
      );
    } finally {
      await reader.stop();
    }
  });

  // A record dead-lettered while it was prepared (no ID here) settles before its batch
  // runs. When a record ahead of it then fails, the partition is fetched again from
  // there and the dead-lettered one comes back: its dead letter must not be written twice.
  it('a record dead-lettered behind a failing one is dead-lettered once', async () => {
    const topic = uniqueName('batch-dlq-once');
    const name = uniqueName('batch-dlq-once-consumer');
    await createTopic(admin, topic, 1);
    await publish(
      producer,
      topic,
      Array.from({ length: 12 }, (_, n) => ({
        id: n === 8 ? undefined : `o-${n}`,
        body: { n },
        partition: 0,
      })),
    );
    const reader = new DeadLetterReader(kafka, admin, `${topic}.dlq`);
    const c = consumer(
      name,
      { topic },
      {
        handler: async (message, ctx) => {
          if (message.id === 'o-5' && ctx.attempt === 1) throw new Error('fails once');
          await insertEffect(name, message, ctx.tx);
        },
      },
    );
    await c.start();
    await reader.start();
    try {
      await until('the group to commit everything', async () => (await groupLag(admin, name, topic)) === 0);
      const offsets = (await effects(name)).map((r) => Number(r.record_offset));
      expect(offsets, 'every record with an ID, in offset order').toEqual(
        Array.from({ length: 12 }, (_, i) => i).filter((i) => i !== 8),
      );
      // A dead letter is produced (and acknowledged) before the offsets past its record are
      // committed, so with everything committed every copy there will ever be is in the
      // DLQ topic: the broker's end offsets count them (where a 1 s pause stood).
      const dlq = await admin.fetchTopicOffsets(`${topic}.dlq`);
      const written = dlq.reduce((sum, p) => sum + Number(p.high) - Number(p.low), 0);
      expect(written, 'dead letters written to the DLQ topic').toBe(1);
      await until('the dead letter read back', async () => (await reader.list()).length >= 1);
      expect((await reader.list()).map((d) => [d.reason, d.originalOffset])).toEqual([['missing-id', '8']]);
    } finally {
      await reader.stop();
    }
  });

  // A record can fail before it joins its batch: a payloadFingerprint function that
  // throws is a failed attempt settled in the pipeline's preparation. The records after it
  // in the partition must not commit ahead of its retry either.
  it('a record failing before it joins the batch holds back the records after it', async () => {
    const topic = uniqueName('batch-prepare');
    const name = uniqueName('batch-prepare-consumer');
    await createTopic(admin, topic, 1);
    await publish(
      producer,
      topic,
      Array.from({ length: 20 }, (_, n) => ({ id: `f-${n}`, body: { n }, partition: 0 })),
    );
    const c = consumer(
      name,
      { topic },
      {
        payloadFingerprint: (message) => {
          if (message.id === 'f-5' && message.deliveryAttempt === 1)
            throw new Error('fingerprint fails once');
          return message.id;
        },
      },
    );
    await c.start();
    await until('the group to commit everything', async () => (await groupLag(admin, name, topic)) === 0);
    const offsets = (await effects(name)).map((r) => Number(r.record_offset));
    expect(offsets, 'committed in offset order').toEqual(Array.from({ length: 20 }, (_, i) => i));
  });
});
