/**
 * A rebalance while handlers run, in one process: a second member joins a group whose
 * first member holds fetched records it has not run yet. Every record must have exactly
 * one effect once the group has committed to the end, on either client
 * (ONCELY_KAFKA_CLIENT).
 *
 * On @platformatic/kafka the first member holds its records in per-partition queues, and
 * above MAX_BUFFERED of them the stream pauses: the rest of the fetch answer being pushed
 * then waits in the stream's own buffer. A rejoin drops the queues and resumes the stream,
 * which hands that stale rest over before the stream has read the committed offsets of the
 * new generation: those later records must not become the start of a partition's queue
 * (the records between the committed offset and them were lost so).
 *
 * A handler slower than the session, running across a rebalance: the lease keeper's
 * heartbeats keep its member, on either client (on @platformatic/kafka they once counted
 * only for the new generation, so the member left the group a session after the rejoin and
 * the record ran again).
 */
import type { Consumer } from '@oncely/core';
import { silentLogger } from '@oncely/core';
import { createKafkaConsumer } from '@oncely/kafka';
import type { Admin, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, groupLag, kafkaClient, publish, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();

describe.skipIf(!brokers)('rebalance while the first member holds fetched records', () => {
  let admin: Admin;
  let producer: Producer;
  let db: TestStore;
  let passed = true;
  const consumers: Consumer<any>[] = [];

  beforeAll(async () => {
    const kafka = kafkaClient(brokers!, 'oncely-rebalance-inflight-test');
    admin = kafka.admin();
    producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    await Promise.all([admin.connect(), producer.connect()]);
    db = await createTestStore('oncely_kafka_inflight');
  });

  let release: (() => void) | undefined;
  afterAll(async () => {
    release?.();
    for (const consumer of consumers) await consumer.stop().catch(() => {});
    await Promise.allSettled([admin?.disconnect(), producer?.disconnect()]);
    await db?.close(passed);
  });

  // Only when a client is named (ONCELY_KAFKA_CLIENT): the main run, on kafkajs by default and
  // loaded, took 30-90 s for its 2,400 records at two handlers a member; it is about
  // @platformatic/kafka's queues (the platformatic job runs it; ONCELY_KAFKA_CLIENT=kafkajs too).
  it.skipIf(clientUnderTest().client === undefined)(
    'a member joins while 2,400 fetched records wait behind held handlers: lost 0, doubled 0',
    async () => {
      try {
        const topic = uniqueName('inflight');
        const name = uniqueName('inflight-consumer');
        const partitions = 4;
        await createTopic(admin, topic, partitions);
        // Many small sends (Kafka hands out whole producer batches) and small fetches: the
        // first member fetches the backlog in several answers, and more than 2,000 records
        // (the platformatic queues' limit) are fetched while every handler is held.
        const ids = Array.from({ length: 2400 }, (_, n) => `inflight-${n}`);
        for (let start = 0; start < ids.length; start += 40) {
          await publish(
            producer,
            topic,
            ids
              .slice(start, start + 40)
              .map((id, i) => ({ id, body: { n: start + i }, partition: i % partitions })),
          );
        }
        let released = false;
        const gate = new Promise<void>((resolve) => (release = resolve));
        const handled = new Map<string, number>();
        const member = (label: string) =>
          createKafkaConsumer({
            name,
            broker: {
              brokers: brokers!,
              topic,
              fromBeginning: true,
              sessionTimeout: 6000,
              maxWaitTimeInMs: 200,
              rebalanceTimeout: 20_000,
              maxBytesPerPartition: 8192,
              ...clientUnderTest(),
            },
            store: db.store,
            // Two held handlers (and their transactions) per member: the store's pool of 10
            // still has connections for the other member's.
            concurrency: 2,
            logger: silentLogger,
            handler: async (message, ctx) => {
              handled.set(label, (handled.get(label) ?? 0) + 1);
              if (!released) await gate;
              await db.insertEffect(ctx.tx, { id: message.id, consumer: label });
            },
          });
        const first = member('first');
        consumers.push(first);
        await first.start();
        await until('the first member running its first records', () => (handled.get('first') ?? 0) >= 1);
        const second = member('second');
        consumers.push(second);
        await second.start();
        // @platformatic/kafka rejoins at once, the handlers still held: the gate opens once the
        // second member runs records or the group rebalances. kafkajs rejoins only once its
        // running batches end: the gate opens once the second member started.
        if (clientUnderTest().client === 'platformatic') {
          await until('the rebalance', async () => {
            if ((handled.get('second') ?? 0) > 0) return true;
            const { groups } = await admin.describeGroups([name]);
            return /Rebalance/.test(groups[0]?.state ?? '');
          });
        }
        released = true;
        release!();
        await until(
          'the group to commit everything',
          async () => (await groupLag(admin, name, topic)) === 0,
          60_000,
        );
        const counts = await db.effectCounts();
        const lost = ids.filter((id) => !counts.has(id));
        const doubled = ids.filter((id) => (counts.get(id) ?? 0) > 1);
        expect(
          { lost: lost.length, doubled: doubled.length, firstLost: lost.slice(0, 5) },
          'records without exactly one effect once the group committed to the end',
        ).toEqual({ lost: 0, doubled: 0, firstLost: [] });
      } catch (error) {
        passed = false;
        throw error;
      }
    },
    120_000,
  );

  it('a handler slower than the session runs across a rebalance: it runs once, its member stays', async () => {
    try {
      const sessionTimeout = 3000;
      const topic = uniqueName('slow-across');
      const name = uniqueName('slow-across-consumer');
      await createTopic(admin, topic, 2);
      const runs = new Map<string, number>();
      const errors: string[] = [];
      const member = (label: string) => {
        const consumer = createKafkaConsumer({
          name,
          broker: {
            brokers: brokers!,
            topic,
            fromBeginning: true,
            sessionTimeout,
            maxWaitTimeInMs: 200,
            rebalanceTimeout: 20_000,
            ...clientUnderTest(),
          },
          store: db.store,
          concurrency: 2,
          logger: silentLogger,
          handler: async (message, ctx) => {
            runs.set(message.id, (runs.get(message.id) ?? 0) + 1);
            // Slow by design: four sessions. The second member joins at its start: this
            // client's rejoin (kafkajs': its batch's end) comes within rebalanceTimeout.
            if (message.id === 'slow')
              await new Promise((resolve) => setTimeout(resolve, 4 * sessionTimeout));
            await db.insertEffect(ctx.tx, { id: message.id, consumer: label });
          },
        });
        for (const event of ['leaseLost', 'ackFailed'] as const) {
          consumer.on(event, (payload) => errors.push(`${label} ${event} ${payload.messageId}`));
        }
        return consumer;
      };
      const first = member('first');
      consumers.push(first);
      await first.start();
      await publish(producer, topic, [{ id: 'slow', body: {}, partition: 0 }]);
      await until('the slow handler running', () => runs.get('slow') === 1);
      const second = member('second');
      consumers.push(second);
      await second.start();
      const ids = ['slow', 'after-0', 'after-1'];
      await publish(producer, topic, [
        { id: 'after-0', body: {}, partition: 0 },
        { id: 'after-1', body: {}, partition: 1 },
      ]);
      await until(
        'the group to commit everything',
        async () => (await groupLag(admin, name, topic)) === 0,
        60_000,
      );
      const counts = await db.effectCounts();
      expect(
        ids.map((id) => `${id}=${counts.get(id) ?? 0}`),
        'effects once the group committed to the end',
      ).toEqual(ids.map((id) => `${id}=1`));
      expect(runs.get('slow'), 'runs of the slow handler').toBe(1);
      // Its member kept the group: no lease lost, no ack refused.
      expect(errors, 'leases lost and acks refused').toEqual([]);
    } catch (error) {
      passed = false;
      throw error;
    }
  }, 120_000);
});
