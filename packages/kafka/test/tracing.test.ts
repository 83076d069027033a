/**
 * Trace propagation through the real broker: `send()` writes the active span's W3C
 * traceparent into the record headers, and the consumer's `process` span is its child.
 * The header is also read back from the kafkajs record itself through `toEnvelope`.
 */
import { type Consumer, extractTraceContext, type Message, silentLogger } from '@oncely/core';
import { createKafkaConsumer, send, toEnvelope } from '@oncely/kafka';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { KafkaMessage, Producer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTopic, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore } from './support/store.js';

const brokers = testBrokers();

describe.skipIf(!brokers)('kafka: trace context in record headers', () => {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const contextManager = new AsyncLocalStorageContextManager();
  let producer: Producer;
  let db: TestStore;
  let consumer: Consumer | undefined;
  let passed = false;

  beforeAll(async () => {
    // What the Node SDK registers: a context manager and the W3C propagator.
    context.setGlobalContextManager(contextManager.enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    producer = kafkaClient(brokers!, 'oncely-tracing-test').producer({
      allowAutoTopicCreation: false,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await producer.connect();
    db = await createTestStore();
  });

  afterAll(async () => {
    await consumer?.stop();
    await producer?.disconnect();
    await db?.close(passed);
    await tracerProvider.shutdown();
    context.disable();
    propagation.disable();
  });

  it('send() injects traceparent; the process span is the producer span’s child', async () => {
    const admin = kafkaClient(brokers!, 'oncely-tracing-admin').admin();
    await admin.connect();
    const topic = uniqueName('otel');
    await createTopic(admin, topic, 1);
    await admin.disconnect();
    const seen: Array<{ message: Message; active: string | undefined }> = [];
    const name = uniqueName('otel-consumer');
    consumer = createKafkaConsumer({
      name,
      broker: { brokers: brokers!, topic, fromBeginning: true, maxWaitTimeInMs: 200, sessionTimeout: 6000 },
      store: db.store,
      logger: silentLogger,
      telemetry: { tracerProvider },
      handler: async (message) => {
        seen.push({ message, active: trace.getActiveSpan()?.spanContext().spanId });
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    const tracer = tracerProvider.getTracer('test-producer');
    const producerSpan = await tracer.startActiveSpan('send order', async (span) => {
      await send(producer, topic, { id: 'order-1', value: { orderId: 1 } });
      span.end();
      return span;
    });
    await spy.waitFor('processed', () => true, 60_000);
    await waitFor(() => spans.getFinishedSpans().some((s) => s.instrumentationScope.name === '@oncely/core'));
    const processSpan = spans.getFinishedSpans().find((s) => s.instrumentationScope.name === '@oncely/core')!;
    const { traceId, spanId } = producerSpan.spanContext();
    expect(processSpan.kind).toBe(SpanKind.CONSUMER);
    expect(processSpan.name).toBe(`process ${topic}`);
    expect(processSpan.spanContext().traceId).toBe(traceId);
    expect(processSpan.parentSpanContext?.spanId).toBe(spanId);
    expect(processSpan.attributes).toMatchObject({
      'messaging.system': 'kafka',
      'messaging.destination.name': topic,
      'messaging.consumer.group.name': name,
      'messaging.destination.partition.id': '0',
      'messaging.kafka.offset': 0,
      'messaging.kafka.message.key': 'order-1',
      'oncely.message.id': 'order-1',
    });
    expect(seen[0]!.active).toBe(processSpan.spanContext().spanId);
    // The kafkajs record itself: a Buffer header, read through the adapter's envelope.
    const raw = seen[0]!.message.raw as { topic: string; partition: number; message: KafkaMessage };
    expect(Buffer.isBuffer(raw.message.headers?.traceparent)).toBe(true);
    const envelope = toEnvelope(raw.topic, raw.partition, raw.message);
    expect(trace.getSpanContext(extractTraceContext(envelope.attributes))).toMatchObject({ traceId, spanId });
    passed = true;
  });
});
