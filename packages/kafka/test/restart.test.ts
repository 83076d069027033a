/**
 * A broker restart in the middle of a run (stopped while records wait, started again on
 * the same data), on a broker of this test's own (so the
 * shared one keeps serving the other test files): the consumer reconnects by itself,
 * nothing is lost and nothing applied twice, in both processing modes.
 */
import type { Consumer, ProcessingMode } from '@oncely/core';
import { silentLogger } from '@oncely/core';
import { createKafkaConsumer } from '@oncely/kafka';
import { ConsumerSpy } from '@oncely/testkit';
import type { Admin, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import {
  createTopic,
  DedicatedBroker,
  groupLag,
  kafkaClient,
  publish,
  testBrokers,
  uniqueName,
} from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

// Ports 19100-19103 by default: clear of the shared broker (19092-19095). Another
// checkout running this test at the same time sets KAFKA_DEDICATED_BASE_PORT.
const basePort = Number(process.env.KAFKA_DEDICATED_BASE_PORT ?? 19100);
const broker = testBrokers() ? new DedicatedBroker(basePort) : undefined;

describe.skipIf(!broker)('broker restart mid-run', () => {
  let admin: Admin;
  let producer: Producer;
  let db: TestStore;
  let passed = true;
  let consumer: Consumer<any> | undefined;

  beforeAll(async () => {
    await broker!.start();
    const kafka = kafkaClient(broker!.brokers, 'oncely-restart-test');
    admin = kafka.admin();
    producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    await Promise.all([admin.connect(), producer.connect()]);
    db = await createTestStore('oncely_kafka_restart');
  }, 180_000);

  afterAll(async () => {
    await consumer?.stop().catch(() => {});
    await Promise.allSettled([admin?.disconnect(), producer?.disconnect()]);
    await db?.close(passed);
    await broker?.stop();
  }, 120_000);

  it.each<ProcessingMode>(['transactional', 'offsets'])(
    '%s mode: nothing lost, nothing doubled',
    async (mode) => {
      try {
        const topic = uniqueName(`restart-${mode}`);
        let runs = 0;
        let openGate!: () => void;
        const brokerDown = new Promise<void>((resolve) => (openGate = resolve));
        const name = uniqueName(`restart-${mode}-consumer`);
        await createTopic(admin, topic, 3);
        consumer = createKafkaConsumer({
          name,
          broker: {
            brokers: broker!.brokers,
            topic,
            fromBeginning: true,
            sessionTimeout: 10_000,
            maxWaitTimeInMs: 200,
            // Small fetches: the consumer cannot have the whole backlog in memory when
            // the broker goes away, so the run really stalls and resumes.
            maxBytesPerPartition: 1024,
            ...clientUnderTest(),
          },
          store: db.store,
          mode,
          concurrency: 3,
          logger: silentLogger,
          backoff: { initialMs: 100, maxMs: 1000 },
          handler: async (message, ctx) => {
            // Past the first 30 runs, held until the broker is down: however long its
            // shutdown takes, records are still waiting when it goes (on a busy machine a
            // slow shutdown let the consumer drain all 300 first, and the run tested no stall).
            if (runs++ >= 30) {
              await Promise.race([
                brokerDown,
                new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true })),
              ]);
            }
            await db.insertEffect(ctx.tx, { id: message.id, consumer: name });
            await new Promise((resolve) => setTimeout(resolve, 20));
          },
        });
        const spy = new ConsumerSpy().attach(consumer, 'c');
        await consumer.start();
        const before = Array.from({ length: 300 }, (_, n) => `${mode}-before-${n}`);
        const after = Array.from({ length: 150 }, (_, n) => `${mode}-after-${n}`);
        // Many small sends: Kafka hands out whole producer batches, whatever the fetch size.
        for (let start = 0; start < before.length; start += 6) {
          await publish(
            producer,
            topic,
            before.slice(start, start + 6).map((id, i) => ({ id, body: {}, partition: (start + i) % 3 })),
          );
        }
        await spy.waitForCount('processed', 30, undefined, 30_000);
        await broker!.pause();
        // The broker went away mid-run: at most the 30 runs before the gate had ended.
        expect(spy.count('processed'), 'records processed when the broker stopped').toBeLessThanOrEqual(30);
        openGate();
        await broker!.resume();
        await publish(
          producer,
          topic,
          after.map((id, n) => ({ id, body: { n }, partition: n % 3 })),
        );
        const all = [...before, ...after];
        await until(
          'every record applied after the restart',
          async () => {
            const counts = await db.effectCounts();
            return all.every((id) => counts.has(id));
          },
          90_000,
        );
        await until(
          'the group to commit everything',
          async () => (await groupLag(admin, name, topic)) === 0,
          60_000,
        );
        const counts = await db.effectCounts();
        const wrong = all.filter((id) => counts.get(id) !== 1).map((id) => `${id}=${counts.get(id)}`);
        expect(wrong, 'records without exactly one effect').toEqual([]);
        expect(spy.count('processed'), 'processed events').toBe(all.length);
        expect(spy.count('deadLettered'), 'dead letters').toBe(0);
        await consumer.stop();
        consumer = undefined;
      } catch (error) {
        passed = false;
        throw error;
      }
    },
    180_000,
  );
});
