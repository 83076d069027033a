import { randomUUID } from 'node:crypto';
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { ServiceBusClient } from '@azure/service-bus';
import { PubSub } from '@google-cloud/pubsub';
import { type Consumer, extractTraceContext, type Message, silentLogger } from '@oncely/core';
import { startPubSubEmulator } from '@oncely/emulators/pubsub';
import { startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import { createPubSubConsumer, publishWithId } from '@oncely/pubsub';
import { createRabbitMqConsumer, publish, toEnvelope as rabbitEnvelope } from '@oncely/rabbitmq';
import { createServiceBusConsumer, sendWithId, toEnvelope as serviceBusEnvelope } from '@oncely/servicebus';
import { createSqsConsumer, sendMessage } from '@oncely/sqs';
import { ConsumerSpy, requireService, waitFor } from '@oncely/testkit';
import { type Span, SpanKind, trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { connect } from 'amqplib';
import { startFauxqs } from 'fauxqs';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { processSpans, startTestSdk } from './otelSdk.js';

// Trace propagation end to end: a producer span is active while a send helper sends, the
// helper writes its W3C traceparent into the message's headers/attributes, the real broker
// (or emulator) carries it, and the consumer's `process` span is a child of the producer
// span. Each test also reads the context back from the SDK's own received message object
// through the adapter's envelope mapping.

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
// External emulators (docker-compose.yml) replace the in-process ones when these are set.
const SQS_ENDPOINT = process.env.SQS_ELASTICMQ_ENDPOINT;
const PUBSUB_EMULATOR_HOST = process.env.PUBSUB_EMULATOR_HOST;
/** An external Service Bus emulator, with the `oncely-tracing` queue of docker/servicebus/Config.json. */
const SERVICEBUS_CONNECTION_STRING = process.env.SERVICEBUS_CONNECTION_STRING;
const hasPostgres = await requireService('PostgreSQL', async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.end();
});

const schema = `otel_prop_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
let sdk: ReturnType<typeof startTestSdk>;
let store: PostgresStore;
const cleanups: Array<() => Promise<unknown> | unknown> = [];
let passed = true;

beforeAll(async () => {
  sdk = startTestSdk();
  if (!hasPostgres) return;
  store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
  await store.migrate();
});
afterEach(async (context) => {
  if (context.task.result?.state === 'fail') passed = false;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  if (store) {
    // A failed run keeps the schema as evidence.
    if (passed) await store.transaction((tx) => tx.query(`DROP SCHEMA "${schema}" CASCADE`));
    await store.close();
  }
  await sdk?.shutdown();
});

const telemetry = () => ({ tracerProvider: sdk.tracerProvider, meterProvider: sdk.meterProvider });

/** What a handler saw: the message as the consumer handed it over, and the active span. */
interface Seen {
  message: Message;
  activeSpanId: string | undefined;
}

function recordingHandler(seen: Seen[]) {
  return async (message: Message) => {
    seen.push({ message, activeSpanId: trace.getActiveSpan()?.spanContext().spanId });
  };
}

/** Starts the consumer and stops it after the test. */
async function started(consumer: Consumer): Promise<ConsumerSpy> {
  const spy = new ConsumerSpy().attach(consumer);
  cleanups.push(() => consumer.stop());
  await consumer.start();
  return spy;
}

/**
 * The consumer's process span is the producer span's child, the handler ran inside it, and
 * the context extracted from the received message's attributes is the producer's.
 */
async function expectJoined(consumerName: string, producer: Span, seen: Seen[], system: string) {
  await waitFor(
    () =>
      processSpans(sdk.finishedSpans()).some(
        (s) => s.attributes['messaging.consumer.group.name'] === consumerName,
      ),
    {
      description: `the process span of ${consumerName}`,
    },
  );
  const span = processSpans(sdk.finishedSpans()).find(
    (s) => s.attributes['messaging.consumer.group.name'] === consumerName,
  ) as ReadableSpan;
  const { traceId, spanId } = producer.spanContext();
  expect(span.kind).toBe(SpanKind.CONSUMER);
  expect(span.spanContext().traceId).toBe(traceId);
  expect(span.parentSpanContext?.spanId).toBe(spanId);
  expect(span.attributes['messaging.system']).toBe(system);
  expect(span.attributes['oncely.outcome']).toBe('processed');
  expect(seen.length).toBeGreaterThanOrEqual(1);
  expect(seen[0]!.activeSpanId).toBe(span.spanContext().spanId);
  const extracted = trace.getSpanContext(extractTraceContext(seen[0]!.message.attributes));
  expect(extracted).toMatchObject({ traceId, spanId, isRemote: true });
  expect(seen[0]!.message.attributes.traceparent).toBe(`00-${traceId}-${spanId}-01`);
  return span;
}

describe.skipIf(!hasPostgres)('trace context through real brokers and emulators', () => {
  it('RabbitMQ: publish() puts traceparent in the AMQP headers; the process span joins the trace', async () => {
    const reachable = await requireService('RabbitMQ', async () => (await connect(RABBITMQ_URL)).close());
    if (!reachable) return;
    const queue = `otel_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    const connection = await connect(RABBITMQ_URL);
    const channel = await connection.createConfirmChannel();
    cleanups.push(async () => {
      for (const name of [queue, `${queue}.dlq`]) await channel.deleteQueue(name).catch(() => {});
      await channel.deleteExchange(`${queue}.dlx`).catch(() => {});
      await connection.close();
    });
    const seen: Seen[] = [];
    const name = `otel-rabbit-${queue}`;
    const spy = await started(
      createRabbitMqConsumer({
        name,
        broker: { url: RABBITMQ_URL, queue },
        store,
        logger: silentLogger,
        telemetry: telemetry(),
        handler: recordingHandler(seen),
      }),
    );
    const { span: producer } = await sdk.inSpan('publish order', () =>
      publish(channel, { queue }, { orderId: 1 }, { messageId: 'order-1' }),
    );
    await spy.waitFor('processed');
    await expectJoined(name, producer, seen, 'rabbitmq');
    // The amqplib message object itself, through the adapter's own envelope mapping.
    const raw = seen[0]!.message.raw as Parameters<typeof rabbitEnvelope>[0];
    expect(Buffer.isBuffer(raw.content)).toBe(true);
    const envelope = rabbitEnvelope(raw, { queue, queueType: 'classic', retry: 'topology' });
    expect(trace.getSpanContext(extractTraceContext(envelope.attributes))?.spanId).toBe(
      producer.spanContext().spanId,
    );
    expect(envelope.attributes.traceparent).toBe(raw.properties.headers?.traceparent);
  });

  it('SQS (fauxqs): sendMessage() adds a traceparent message attribute; the process span joins the trace', async () => {
    const server = SQS_ENDPOINT ? undefined : await startFauxqs({ port: 0, logger: false });
    const client = new SQSClient({
      endpoint: SQS_ENDPOINT ?? server!.address,
      region: 'us-east-1',
      credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
    });
    cleanups.push(async () => {
      client.destroy();
      await server?.stop();
    });
    const { QueueUrl: queueUrl } = await client.send(
      new CreateQueueCommand({ QueueName: `otel-${randomUUID().slice(0, 8)}` }),
    );
    const seen: Seen[] = [];
    const name = `otel-sqs-${randomUUID().slice(0, 8)}`;
    const spy = await started(
      createSqsConsumer({
        name,
        broker: { queueUrl: queueUrl!, client, waitTimeSeconds: 1 },
        store,
        logger: silentLogger,
        telemetry: telemetry(),
        handler: recordingHandler(seen),
      }),
    );
    const { span: producer } = await sdk.inSpan('send order', () =>
      sendMessage(client, { queueUrl: queueUrl!, id: 'order-1', body: { orderId: 1 } }),
    );
    await spy.waitFor('processed');
    await expectJoined(name, producer, seen, 'aws_sqs');
    // The SDK's received Message: the attribute is a String message attribute.
    const raw = seen[0]!.message.raw as {
      MessageAttributes?: Record<string, { DataType?: string; StringValue?: string }>;
    };
    expect(raw.MessageAttributes?.traceparent).toMatchObject({ DataType: 'String' });
    expect(raw.MessageAttributes?.traceparent?.StringValue).toContain(producer.spanContext().spanId);

    // SQS allows 10 attributes: the caller's 9 and message-id leave no room, so the trace
    // context yields (the send still succeeds) and the consumer starts a trace of its own.
    const nine = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`a${i}`, String(i)]));
    await sdk.inSpan('send full', () =>
      sendMessage(client, { queueUrl: queueUrl!, id: 'order-2', body: {}, attributes: nine }),
    );
    await spy.waitFor('processed', (e) => e.event.messageId === 'order-2');
    expect(Object.keys(seen[1]!.message.attributes).sort()).toEqual(
      [...Object.keys(nine), 'message-id'].sort(),
    );
    await waitFor(() =>
      processSpans(sdk.finishedSpans()).find((s) => s.attributes['oncely.message.id'] === 'order-2'),
    );
    const own = processSpans(sdk.finishedSpans()).find(
      (s) => s.attributes['oncely.message.id'] === 'order-2',
    )!;
    expect(own.parentSpanContext).toBeUndefined();
  });

  it('Pub/Sub (emulator): publishWithId() adds a traceparent attribute; the process span joins the trace', async () => {
    const emulator = PUBSUB_EMULATOR_HOST ? undefined : await startPubSubEmulator({ port: 0 });
    const apiEndpoint = PUBSUB_EMULATOR_HOST ?? emulator!.address;
    const pubsub = new PubSub({ projectId: 'oncely-test', apiEndpoint });
    cleanups.push(async () => {
      await pubsub.close();
      await emulator?.stop();
    });
    const [topic] = await pubsub.createTopic(`otel-${randomUUID().slice(0, 8)}`);
    const [subscription] = await topic.createSubscription(`otel-sub-${randomUUID().slice(0, 8)}`, {
      ackDeadlineSeconds: 10,
    });
    const seen: Seen[] = [];
    const name = `otel-pubsub-${randomUUID().slice(0, 8)}`;
    const spy = await started(
      createPubSubConsumer({
        name,
        broker: { projectId: 'oncely-test', apiEndpoint, subscription: subscription.name },
        store,
        logger: silentLogger,
        telemetry: telemetry(),
        handler: recordingHandler(seen),
      }),
    );
    const { span: producer } = await sdk.inSpan('publish order', () =>
      publishWithId(topic, { id: 'order-1', body: { orderId: 1 } }),
    );
    await spy.waitFor('processed');
    await expectJoined(name, producer, seen, 'gcp_pubsub');
    // The client library's received Message object.
    const raw = seen[0]!.message.raw as { attributes: Record<string, string> };
    expect(raw.attributes.traceparent).toContain(producer.spanContext().traceId);
  });

  it('Service Bus (emulator): sendWithId() adds a traceparent application property; the process span joins the trace', async () => {
    // The official emulator cannot create queues at run time: it has `oncely-tracing`.
    const emulator = SERVICEBUS_CONNECTION_STRING ? undefined : await startServiceBusEmulator({ port: 0 });
    const connectionString = SERVICEBUS_CONNECTION_STRING ?? emulator!.connectionString;
    const client = new ServiceBusClient(connectionString);
    cleanups.push(async () => {
      await client.close();
      await emulator?.stop();
    });
    const queue = emulator ? `otel-${randomUUID().slice(0, 8)}` : 'oncely-tracing';
    emulator?.createQueue(queue, { MaxDeliveryCount: 10 });
    const seen: Seen[] = [];
    const name = `otel-sb-${randomUUID().slice(0, 8)}`;
    const spy = await started(
      createServiceBusConsumer({
        name,
        broker: { connectionString, queueName: queue, maxWaitTimeMs: 300 },
        store,
        logger: silentLogger,
        telemetry: telemetry(),
        handler: recordingHandler(seen),
      }),
    );
    const sender = client.createSender(queue);
    cleanups.push(() => sender.close());
    const { span: producer } = await sdk.inSpan('send order', () =>
      sendWithId(sender, { messageId: 'order-1', body: { orderId: 1 } }),
    );
    await spy.waitFor('processed');
    await expectJoined(name, producer, seen, 'servicebus');
    // The @azure/service-bus ServiceBusReceivedMessage, through the adapter's envelope mapping.
    const raw = seen[0]!.message.raw as Parameters<typeof serviceBusEnvelope>[0];
    expect(raw.applicationProperties?.traceparent).toContain(producer.spanContext().spanId);
    const envelope = serviceBusEnvelope(raw, queue);
    expect(trace.getSpanContext(extractTraceContext(envelope.attributes))?.traceId).toBe(
      producer.spanContext().traceId,
    );
  });

  it("reads Azure's Diagnostic-Id and Pub/Sub's googclient_traceparent when no traceparent is present", () => {
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    for (const name of ['Diagnostic-Id', 'googclient_traceparent']) {
      const context = trace.getSpanContext(extractTraceContext({ [name]: traceparent }));
      expect(context).toMatchObject({
        traceId: '0af7651916cd43dd8448eb211c80319c',
        spanId: 'b7ad6b7169203331',
      });
    }
    expect(trace.getSpanContext(extractTraceContext({ 'message-id': 'x' }))).toBeUndefined();
    expect(trace.getSpanContext(extractTraceContext({ traceparent: 'garbage' }))).toBeUndefined();
  });
});
