import { DeleteQueueCommand } from '@aws-sdk/client-sqs';
import { DeadLetters, silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// The dead-letter gauges on SQS (fauxqs) read through the OpenTelemetry SDK's in-memory
// exporter, DELTA temporality (a collection shows only what its callbacks observed):
// the DLQ's depth after N dead letters, 0 after a replay and a discard, no oldest age
// (SQS has none but in CloudWatch), and nothing when the DLQ is gone.
const hasPostgres = await postgresAvailable();

const exporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
const meterProvider = new MeterProvider({ readers: [reader] });

/** This collection's dead-letter gauge values of `consumer`, by name (absent: not observed). */
async function deadLetterGauges(consumer: string): Promise<Record<string, number>> {
  exporter.reset();
  await reader.forceFlush();
  const values: Record<string, number> = {};
  for (const resource of exporter.getMetrics())
    for (const scope of resource.scopeMetrics)
      for (const metric of scope.metrics)
        for (const point of metric.dataPoints)
          if (
            metric.descriptor.name.startsWith('oncely.dead_letters.') &&
            point.attributes['messaging.consumer.group.name'] === consumer
          ) {
            expect(point.attributes['messaging.system']).toBe('aws_sqs');
            values[metric.descriptor.name] = point.value as number;
          }
  return values;
}

describe.skipIf(!hasPostgres)('SQS dead-letter gauges (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('gauges');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await meterProvider.shutdown();
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it('reports the DLQ depth, 0 after a discard, and nothing once the DLQ is gone', async () => {
    const dlq = await emulator.createQueue('gauges-dlq');
    const queue = await emulator.createQueue('gauges', { VisibilityTimeout: '5' });
    const name = `gauges-${dlq.name}`;
    const config = {
      name,
      broker: {
        type: 'sqs' as const,
        queueUrl: queue.url,
        client: emulator.client,
        waitTimeSeconds: 1,
        deadLetterQueueUrl: dlq.url,
      },
      store: db.store,
      concurrency: 4,
      logger: silentLogger,
      telemetry: { meterProvider },
      handler: async (
        message: { id: string },
        ctx: { tx: { query(s: string, p: unknown[]): Promise<unknown> } },
      ) => {
        await ctx.tx.query(`INSERT INTO ${db.effects} (message_id) VALUES ($1)`, [message.id]);
      },
    };
    const consumer = createSqsConsumer<{ id: string }>(config);
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    expect(await deadLetterGauges(name)).toEqual({ 'oncely.dead_letters.depth': 0 });

    // Bodies that are not JSON: dead-lettered at once (invalid-body).
    const ids = Array.from({ length: 7 }, (_, i) => `bad-${i}`);
    await send(
      emulator.client,
      queue.url,
      ids.map((id) => ({ id, body: `{"id": "${id}", broken` })),
    );
    await spy.waitForCount('deadLettered', 7, undefined, 60_000);
    // SQS's counts are approximate: wait on what the gauge reads, not on a sleep.
    const seven = await waitFor(
      async () => {
        const values = await deadLetterGauges(name);
        return values['oncely.dead_letters.depth'] === 7 ? values : undefined;
      },
      { timeoutMs: 60_000, description: 'a depth of 7' },
    );
    expect(seven).toEqual({ 'oncely.dead_letters.depth': 7 }); // no oldest age on SQS

    const dead = await DeadLetters.open(config);
    await dead.discard({ ids: ids.slice(0, 4) }, { by: 'gauge-test' });
    await waitFor(async () => (await deadLetterGauges(name))['oncely.dead_letters.depth'] === 3, {
      timeoutMs: 60_000,
      description: 'a depth of 3 after discarding 4',
    });
    await dead.discard({ all: true }, { by: 'gauge-test' });
    await waitFor(async () => (await deadLetterGauges(name))['oncely.dead_letters.depth'] === 0, {
      timeoutMs: 60_000,
      description: 'a depth of 0',
    });

    // The DLQ deleted under the consumer: GetQueueAttributes fails, nothing is observed.
    await emulator.client.send(new DeleteQueueCommand({ QueueUrl: dlq.url }));
    expect(await deadLetterGauges(name)).toEqual({});
    await consumer.stop();
    expect(await deadLetterGauges(name)).toEqual({});
  }, 120_000);

  it('counts a replayed dead letter out of the DLQ', async () => {
    const dlq = await emulator.createQueue('replay-dlq');
    const queue = await emulator.createQueue('replay', { VisibilityTimeout: '5' });
    const name = `gauges-${dlq.name}`;
    const broken = { on: true };
    const config = {
      name,
      broker: {
        type: 'sqs' as const,
        queueUrl: queue.url,
        client: emulator.client,
        waitTimeSeconds: 1,
        deadLetterQueueUrl: dlq.url,
      },
      store: db.store,
      maxAttempts: 1,
      concurrency: 4,
      logger: silentLogger,
      telemetry: { meterProvider },
      handler: async (
        message: { id: string },
        ctx: { tx: { query(s: string, p: unknown[]): Promise<unknown> } },
      ) => {
        if (broken.on) throw new Error('payment service down');
        await ctx.tx.query(`INSERT INTO ${db.effects} (message_id) VALUES ($1)`, [message.id]);
      },
    };
    const consumer = createSqsConsumer<{ id: string }>(config);
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    const ids = Array.from({ length: 5 }, (_, i) => `fail-${i}`);
    await send(
      emulator.client,
      queue.url,
      ids.map((id) => ({ id, body: JSON.stringify({ id }) })),
    );
    await spy.waitForCount('deadLettered', 5, undefined, 60_000);
    await waitFor(async () => (await deadLetterGauges(name))['oncely.dead_letters.depth'] === 5, {
      timeoutMs: 60_000,
      description: 'a depth of 5',
    });
    broken.on = false;
    await (await DeadLetters.open(config)).replay({});
    await spy.waitForCount('processed', 5, undefined, 60_000);
    await waitFor(async () => (await deadLetterGauges(name))['oncely.dead_letters.depth'] === 0, {
      timeoutMs: 60_000,
      description: 'a depth of 0 after the replay',
    });
  }, 120_000);
});
