import { type Consumer, type ConsumerConfig, type SqlClient, silentLogger } from '@oncely/core';
import { createMemoryConsumer, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { ConsumerSpy, requireService, TcpProxy, waitFor } from '@oncely/testkit';
import { context, metrics, type SpanContext, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { processSpans, startTestSdk, total } from './otelSdk.js';

// Spans and metrics of a consumer on the memory broker and PGlite, read back through the
// OpenTelemetry SDK's in-memory exporters: the producer's trace context travels in the
// message attributes, each delivery gets a `process` span under it, and the counters
// follow the consumer's events.

let sdk: ReturnType<typeof startTestSdk>;
let store: PostgresStore;
const cleanups: Array<() => Promise<void> | void> = [];
let run = 0;

beforeAll(async () => {
  sdk = startTestSdk();
  store = PostgresStore.embedded();
  await store.migrate();
  await store.transaction((tx) => tx.query('CREATE TABLE effects (message_id text NOT NULL)'));
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await store?.close();
  await sdk?.shutdown();
});

type Options = Omit<ConsumerConfig<unknown, SqlClient>, 'name' | 'broker' | 'store'> & {
  visibilityTimeoutMs?: number;
};

/** A consumer on a fresh queue and consumer name, with the test SDK's providers. */
async function startConsumer(options: Options) {
  const name = `otel-${++run}`;
  const queue = `q-${run}`;
  const broker = new MemoryBroker();
  broker.createQueue(queue, { visibilityTimeoutMs: options.visibilityTimeoutMs ?? 5000 });
  const { visibilityTimeoutMs: _ignored, ...config } = options;
  const consumer: Consumer = createMemoryConsumer({
    name,
    broker: { broker, queue },
    store,
    logger: silentLogger,
    backoff: { initialMs: 10, maxMs: 10 },
    telemetry: { tracerProvider: sdk.tracerProvider, meterProvider: sdk.meterProvider },
    ...config,
  });
  const spy = new ConsumerSpy().attach(consumer);
  cleanups.push(() => broker.close());
  cleanups.push(() => consumer.stop());
  await consumer.start();
  return { name, queue, broker, consumer, spy };
}

/** The finished `process` spans of one consumer. */
function spansOf(consumer: string): ReadableSpan[] {
  return processSpans(sdk.finishedSpans()).filter(
    (s) => s.attributes['messaging.consumer.group.name'] === consumer,
  );
}

async function waitForSpans(consumer: string, count: number): Promise<ReadableSpan[]> {
  await waitFor(() => spansOf(consumer).length >= count, { description: `${count} process spans` });
  return spansOf(consumer);
}

const insertEffect = (id: string, tx: SqlClient) =>
  tx.query('INSERT INTO effects(message_id) VALUES ($1)', [id]);

describe('OpenTelemetry on the memory broker with PGlite', () => {
  it('gives each delivery a process span under the producer trace, with messaging attributes and its outcome', async () => {
    const handlerSpans = new Map<string, SpanContext[]>();
    const { name, queue, broker, spy } = await startConsumer({
      maxAttempts: 3,
      handler: async (message, ctx) => {
        // The handler runs inside its delivery's span: its own spans are children of it.
        await sdk.tracer.startActiveSpan('charge', async (span) => {
          const list = handlerSpans.get(message.id) ?? [];
          list.push(span.spanContext());
          handlerSpans.set(message.id, list);
          span.end();
        });
        if (message.id === 'flaky' && ctx.attempt === 1) throw new Error('provider down');
        await insertEffect(message.id, ctx.tx);
      },
    });
    const { span: producer } = await sdk.inSpan('checkout', async () => {
      await broker.send(queue, { id: 'order-1', body: { amount: 40 } });
      await broker.send(queue, { id: 'order-1', body: { amount: 40 } }); // a producer retry
      await broker.send(queue, { id: 'flaky', body: { amount: 10 } });
      await broker.send(queue, { id: 'poison', body: 'not json {' });
    });
    await spy.waitForCount('processed', 2);
    await spy.waitFor('deadLettered');
    const spans = await waitForSpans(name, 5);

    const traceId = producer.spanContext().traceId;
    for (const span of spans) {
      expect(span.name).toBe(`process ${queue}`);
      expect(span.kind).toBe(SpanKind.CONSUMER);
      expect(span.spanContext().traceId).toBe(traceId);
      expect(span.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
      expect(span.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId]);
      expect(span.attributes).toMatchObject({
        'messaging.system': 'oncely_memory',
        'messaging.destination.name': queue,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.consumer.group.name': name,
      });
      expect(span.attributes['messaging.message.id']).toEqual(expect.any(String));
    }
    const byId = (id: string) => spans.filter((s) => s.attributes['oncely.message.id'] === id);
    expect(
      byId('order-1').map((s) => [s.attributes['oncely.outcome'], s.attributes['oncely.settlement']]),
    ).toEqual([
      ['processed', 'ack'],
      ['duplicate', 'ack'],
    ]);
    const [failed, retried] = byId('flaky');
    expect(failed!.attributes).toMatchObject({
      'oncely.outcome': 'failed',
      'oncely.attempt': 1,
      'oncely.settlement': 'retry',
    });
    expect(failed!.attributes['error.type']).toBe('Error');
    expect(failed!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'provider down' });
    expect(failed!.events.map((e) => e.name)).toEqual(['exception']);
    expect(retried!.attributes).toMatchObject({ 'oncely.outcome': 'processed', 'oncely.attempt': 2 });
    expect(retried!.status.code).toBe(SpanStatusCode.UNSET);
    expect(byId('poison').map((s) => s.attributes)).toEqual([
      expect.objectContaining({
        'oncely.settlement': 'dead-letter',
        'oncely.dead_letter.reason': 'invalid-body',
      }),
    ]);

    // Every handler span is the child of the process span of its own delivery.
    const charges = sdk.finishedSpans().filter((s) => s.name === 'charge');
    expect(charges).toHaveLength(3); // order-1 once, flaky twice: neither the duplicate nor the poison ran
    for (const charge of charges) {
      const parent = spans.find((s) => s.spanContext().spanId === charge.parentSpanContext?.spanId);
      expect(parent).toBeDefined();
      expect(
        handlerSpans.get(parent!.attributes['oncely.message.id'] as string)?.map((c) => c.spanId),
      ).toContain(charge.spanContext().spanId);
    }
  });

  it('counts processed, duplicate, failed, retried and dead-lettered messages and records handler durations', async () => {
    const { name, queue, broker, spy } = await startConsumer({
      maxAttempts: 2,
      handler: async (message, ctx) => {
        if (message.id.startsWith('bad')) throw new Error('always fails');
        await insertEffect(message.id, ctx.tx);
      },
    });
    for (const id of ['m1', 'm2', 'm1', 'bad-1']) await broker.send(queue, { id, body: {} });
    await spy.waitForCount('processed', 2);
    await spy.waitFor('duplicate');
    await spy.waitFor('deadLettered');
    await waitForSpans(name, 5); // m1, m2, m1 again, bad-1 twice

    const points = await sdk.metricPoints();
    const mine = { 'messaging.consumer.group.name': name, 'messaging.system': 'oncely_memory' };
    expect(total(points, 'oncely.messages.received', mine)).toBe(5);
    expect(total(points, 'oncely.messages.processed', mine)).toBe(2);
    expect(total(points, 'oncely.messages.duplicates', mine)).toBe(1);
    expect(total(points, 'oncely.messages.failed', { ...mine, 'error.type': 'Error' })).toBe(2);
    expect(total(points, 'oncely.messages.retried', mine)).toBe(1);
    expect(
      total(points, 'oncely.messages.dead_lettered', {
        ...mine,
        'oncely.dead_letter.reason': 'max-attempts',
      }),
    ).toBe(1);
    expect(total(points, 'oncely.settlements.failed', mine)).toBe(0);
    const durations = points.filter(
      (p) => p.name === 'oncely.handler.duration' && p.attributes['messaging.consumer.group.name'] === name,
    );
    expect(durations.every((p) => p.unit === 's' && p.scope === '@oncely/core')).toBe(true);
    expect(total(durations, 'oncely.handler.duration', { 'oncely.outcome': 'processed' })).toBe(2);
    expect(total(durations, 'oncely.handler.duration', { 'oncely.outcome': 'failed' })).toBe(2);
  });

  it('counts a lease lost, the ack that then fails, and the duplicate its redelivery becomes', async () => {
    // The broker refuses the first delivery's lease extensions, so its visibility timeout
    // runs out while the handler works: the lease is lost, the broker redelivers, the commit
    // still goes through, the ack is refused (stale receipt), and the redelivery meets the
    // marker. This is why a rise in duplicates points at handlers slower than their lease.
    // The redelivery's lease is renewed as usual: with every extension refused and 300 ms
    // leases, a loaded machine's stall lost the redelivery's lease too (2 lost, not 1).
    let spy!: ConsumerSpy;
    const { name, queue, broker, ...started } = await startConsumer({
      visibilityTimeoutMs: 2000,
      concurrency: 2,
      handler: async (message, ctx) => {
        if (ctx.attempt === 1) {
          if (!ctx.signal.aborted)
            await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
          await spy.waitForCount('received', 2); // the redelivery is in, waiting on our marker's row lock
        }
        await insertEffect(message.id, ctx.tx);
      },
    });
    spy = started.spy;
    broker.faults = { failExtend: (_id, target) => target.deliveryCount === 1 };
    await broker.send(queue, { id: 'slow', body: {} });
    await spy.waitFor('ackFailed');
    await spy.waitFor('duplicate');
    const spans = await waitForSpans(name, 2);
    const points = await sdk.metricPoints();
    const mine = { 'messaging.consumer.group.name': name };
    expect(total(points, 'oncely.leases.lost', mine)).toBe(1);
    expect(total(points, 'oncely.settlements.failed', mine)).toBe(1);
    expect(total(points, 'oncely.messages.processed', mine)).toBe(1);
    expect(total(points, 'oncely.messages.duplicates', mine)).toBe(1);
    const first = spans.find((s) => s.attributes['oncely.outcome'] === 'processed')!;
    expect(first.attributes['oncely.delivery.count']).toBe(1);
    expect(first.events.map((e) => e.name)).toContain('settlement failed');
    const second = spans.find((s) => s.attributes['oncely.outcome'] === 'duplicate')!;
    expect(second.attributes['oncely.delivery.count']).toBe(2);
  });

  it('counts a leased-mode takeover of an expired claim', async () => {
    const { name, queue, broker, spy } = await startConsumer({ mode: 'leased', handler: async () => 'done' });
    // A crashed owner's claim, already expired (1 ms lease, database time).
    const crashed = await store.acquireLease({ consumer: name, messageId: 'job-1' }, 1);
    expect(crashed.status).toBe('acquired');
    await broker.send(queue, { id: 'job-1', body: {} });
    await spy.waitFor('processed');
    await waitForSpans(name, 1);
    const points = await sdk.metricPoints();
    expect(total(points, 'oncely.leases.taken_over', { 'messaging.consumer.group.name': name })).toBe(1);
  });

  it('gives each handler of a batch its own delivery span', async () => {
    const seen = new Map<string, string | undefined>();
    const { name, queue, broker, spy } = await startConsumer({
      concurrency: 3,
      batch: { size: 3, maxWaitMs: 200 },
      handler: async (message, ctx) => {
        seen.set(message.id, trace.getActiveSpan()?.spanContext().spanId);
        await insertEffect(message.id, ctx.tx);
      },
    });
    const producers = new Map<string, string>();
    for (const id of ['b1', 'b2', 'b3']) {
      const { span } = await sdk.inSpan(`send ${id}`, () => broker.send(queue, { id, body: {} }));
      producers.set(id, span.spanContext().traceId);
    }
    await spy.waitForCount('processed', 3);
    const spans = await waitForSpans(name, 3);
    for (const id of ['b1', 'b2', 'b3']) {
      const span = spans.find((s) => s.attributes['oncely.message.id'] === id)!;
      expect(span.spanContext().traceId).toBe(producers.get(id));
      expect(seen.get(id)).toBe(span.spanContext().spanId);
    }
  });

  it('falls back to the globally registered providers, even when the SDK starts after the consumer', async () => {
    try {
      const { name, queue, broker, spy } = await startConsumer({
        telemetry: undefined,
        handler: async (message, ctx) => insertEffect(message.id, ctx.tx),
      });
      // What NodeSDK.start() does, after the consumer was created and started.
      trace.setGlobalTracerProvider(sdk.tracerProvider);
      metrics.setGlobalMeterProvider(sdk.meterProvider);
      await broker.send(queue, { id: 'g1', body: {} });
      await spy.waitFor('processed');
      await waitForSpans(name, 1);
      expect(
        total(await sdk.metricPoints(), 'oncely.messages.processed', {
          'messaging.consumer.group.name': name,
        }),
      ).toBe(1);
    } finally {
      trace.disable();
      metrics.disable();
    }
  });

  it('without a tracer provider, still runs the handler in the producer trace context a context manager carries', async () => {
    // No tracer provider anywhere (the consumer skips its no-op span then), but the global
    // context manager is registered: the handler must still see the producer's context.
    const seen = new Map<string, string | undefined>();
    const { queue, broker, spy } = await startConsumer({
      telemetry: undefined,
      handler: async (message, ctx) => {
        seen.set(message.id, trace.getSpanContext(context.active())?.traceId);
        await insertEffect(message.id, ctx.tx);
      },
    });
    const { span: producer } = await sdk.inSpan('checkout', () => broker.send(queue, { id: 'c1', body: {} }));
    await spy.waitFor('processed');
    expect(seen.get('c1')).toBe(producer.spanContext().traceId);
  });

  it('refuses a telemetry option that is not a provider, naming the field', () => {
    const broker = new MemoryBroker();
    cleanups.push(() => broker.close());
    expect(() =>
      createMemoryConsumer({
        name: 'bad-telemetry',
        broker: { broker, queue: 'q' },
        store,
        handler: async () => {},
        telemetry: { tracerProvider: {} as never },
      }),
    ).toThrow(/telemetry\.tracerProvider must be an OpenTelemetry tracerProvider/);
    expect(() =>
      createMemoryConsumer({
        name: 'bad-telemetry',
        broker: { broker, queue: 'q' },
        store,
        handler: async () => {},
        telemetry: { tracer: {} } as never,
      }),
    ).toThrow(/telemetry\.tracer is not a telemetry option/);
  });
});

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const hasPostgres = await requireService('PostgreSQL', async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.end();
});

describe.skipIf(!hasPostgres)('OpenTelemetry: store outages (real PostgreSQL behind a TCP proxy)', () => {
  it('counts the store becoming unavailable, and the message is processed once it answers', async () => {
    const database = new URL(DATABASE_URL);
    const schema = `otel_outage_${process.pid}_${Date.now()}`;
    const proxy = new TcpProxy({ host: database.hostname, port: Number(database.port || 5432) });
    const via = new URL(DATABASE_URL);
    via.hostname = '127.0.0.1';
    via.port = String(await proxy.start());
    const server = new PostgresStore({ connectionString: via.href, schema });
    cleanups.push(async () => {
      await proxy.resume();
      await server.transaction((tx) => tx.query(`DROP SCHEMA "${schema}" CASCADE`));
      await server.close();
      await proxy.close();
    });
    await server.migrate();
    const name = `otel-outage-${++run}`;
    const broker = new MemoryBroker();
    broker.createQueue('q');
    const consumer = createMemoryConsumer({
      name,
      broker: { broker, queue: 'q' },
      store: server,
      logger: silentLogger,
      telemetry: { tracerProvider: sdk.tracerProvider, meterProvider: sdk.meterProvider },
      handler: async () => {},
    });
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => broker.close());
    cleanups.push(() => consumer.stop());
    await consumer.start();
    consumer.on('storeUnavailable', () => void proxy.resume());
    await proxy.cut();
    await broker.send('q', { id: 'during-outage', body: {} });
    await spy.waitFor('storeUnavailable');
    await spy.waitFor('processed', () => true, 20_000);
    const points = await sdk.metricPoints();
    expect(total(points, 'oncely.store.unavailable', { 'messaging.consumer.group.name': name })).toBe(1);
    expect(total(points, 'oncely.messages.processed', { 'messaging.consumer.group.name': name })).toBe(1);
  });
});
