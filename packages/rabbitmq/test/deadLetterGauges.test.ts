import {
  type BrokerAdapter,
  type Consumer,
  type ConsumerConfig,
  createConsumerWith,
  DeadLetters,
  type Logger,
} from '@oncely/core';
import { createAdapter } from '@oncely/rabbitmq';
import { ConsumerSpy } from '@oncely/testkit';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestStore,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// The dead-letter gauges on real RabbitMQ, read through the OpenTelemetry SDK's in-memory
// exporter, DELTA temporality (a collection shows only what its callbacks observed): the
// `${queue}.dlq` depth from a passive declare after N dead letters, 0 after a replay and
// a discard, no oldest age (AMQP reports none), nothing while the DLQ is missing, and
// the depth again once it is back (the refused declare closed the gauges' channel; the
// next calls back off rather than open a channel per collection).
const available = await servicesAvailable();

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
            expect(point.attributes['messaging.system']).toBe('rabbitmq');
            values[metric.descriptor.name] = point.value as number;
          }
  return values;
}

type Body = { id: string };

describe.skipIf(!available)('RabbitMQ dead-letter gauges (real RabbitMQ + PostgreSQL)', () => {
  let raw: RawBroker;
  let db: TestStore;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(async () => {
    await meterProvider.shutdown();
    await db?.cleanup();
    await raw?.close();
  });

  it('reports the DLQ depth, 0 after a replay and a discard, nothing while the DLQ is missing', async () => {
    const queue = unique('gauges');
    const name = `c-${queue}`;
    const broken = { on: true };
    const gaugeWarnings: unknown[] = [];
    const quiet = () => {};
    const logger: Logger = {
      debug: quiet,
      info: quiet,
      error: quiet,
      warn: (message, fields) => {
        if (message.startsWith('dead-letter gauges')) gaugeWarnings.push(fields?.error);
      },
    };
    const config: ConsumerConfig<Body> = {
      name,
      broker: { type: 'rabbitmq', url: RABBITMQ_URL, queue },
      store: db.store,
      logger,
      maxAttempts: 1,
      concurrency: 4,
      telemetry: { meterProvider },
      handler: async (message, ctx) => {
        if (broken.on) throw new Error('payment service down');
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    };
    let adapter: BrokerAdapter | undefined;
    const consumer: Consumer<Body> = createConsumerWith(config, (section, options) => {
      adapter = createAdapter(section, options);
      return adapter;
    });
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    cleanups.push(() => deleteTopology(raw, queue));
    cleanups.push(() => consumer.stop());
    expect(await deadLetterGauges(name)).toEqual({ 'oncely.dead_letters.depth': 0 });

    const failing = Array.from({ length: 4 }, (_, i) => `${queue}-fail-${i}`);
    const garbled = Array.from({ length: 3 }, (_, i) => `${queue}-bad-${i}`);
    await raw.publish(queue, [
      ...failing.map((id) => ({ id, body: { id } })),
      ...garbled.map((id) => ({ id, rawBody: `{"id": "${id}", broken` })),
    ]);
    await spy.waitForCount('deadLettered', 7, undefined, 60_000);
    // The dead-letter publish is confirmed before the original is acked: the count is there.
    await waitFor(async () => (await raw.ready(`${queue}.dlq`)) === 7, '7 dead letters', 60_000);
    expect(await deadLetterGauges(name)).toEqual({ 'oncely.dead_letters.depth': 7 }); // no age on RabbitMQ

    broken.on = false;
    const dlq = await DeadLetters.open(config);
    await dlq.replay({ ids: failing });
    await spy.waitForCount('processed', 4, undefined, 60_000);
    // The pass gave the other 3 back (nack with requeue), which the broker applies after
    // the pass returned: they count once they are ready again.
    await waitFor(async () => (await raw.ready(`${queue}.dlq`)) === 3, '3 dead letters back', 60_000);
    expect(await deadLetterGauges(name)).toEqual({ 'oncely.dead_letters.depth': 3 });
    await dlq.discard({ all: true }, { by: 'gauge-test' });
    expect(await deadLetterGauges(name)).toEqual({ 'oncely.dead_letters.depth': 0 });

    // The DLQ deleted: the passive declare is refused (404, which closes the gauges'
    // channel) and nothing is observed. The next collections do not open a channel each
    // to be refused again: they back off, and one warning says why.
    const connection = (adapter as unknown as { connection: { createChannel(): Promise<unknown> } })
      .connection;
    const createChannel = connection.createChannel.bind(connection);
    let opened = 0;
    connection.createChannel = () => {
      opened++;
      return createChannel();
    };
    await raw.deleteQueues(`${queue}.dlq`);
    for (let i = 0; i < 5; i++) expect(await deadLetterGauges(name)).toEqual({});
    expect(opened, 'channels opened by 5 collections with the DLQ missing').toBeLessThanOrEqual(2);
    expect(gaugeWarnings).toHaveLength(1);
    expect(String(gaugeWarnings[0])).toContain('404');
    const ch = await raw.freshChannel();
    await ch.assertQueue(`${queue}.dlq`, { durable: true });
    await ch.close();
    // Seen again once the back-off is over (a number of collections, not a time).
    await waitFor(
      async () => (await deadLetterGauges(name))['oncely.dead_letters.depth'] === 0,
      'the depth once the DLQ is back',
      30_000,
    );
    expect(await deadLetterGauges(name)).toEqual({ 'oncely.dead_letters.depth': 0 });

    await consumer.stop();
    expect(await deadLetterGauges(name)).toEqual({});
  });
});
