import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { clientFor, startEmulator, subscriberClientFor, uniqueName, waitFor } from './support.js';

// The StreamingPull wire protocol through the generated v1 client (what the handwritten
// subscriber sits on): subscription_properties on the responses, keepalives, acks and
// modAcks sent on the stream, INVALID_ARGUMENT for a bad first request.

let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = clientFor(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

interface Response {
  receivedMessages?: Array<{ ackId?: string; message?: { data?: Buffer } }>;
  subscriptionProperties?: { exactlyOnceDeliveryEnabled?: boolean; messageOrderingEnabled?: boolean };
}

it('sends subscription_properties, accepts keepalives and acks on the stream', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'), {
    enableExactlyOnceDelivery: true,
    enableMessageOrdering: true,
  });
  const client = subscriberClientFor(emulator);
  const stream = client.streamingPull();
  const responses: Response[] = [];
  stream.on('data', (response: Response) => responses.push(response));
  stream.on('error', () => {});
  stream.write({ subscription: subscription.name, streamAckDeadlineSeconds: 10, maxOutstandingMessages: 5 });
  await waitFor(() => responses.length >= 1);
  expect(responses[0]!.subscriptionProperties).toEqual({
    exactlyOnceDeliveryEnabled: true,
    messageOrderingEnabled: true,
  });
  // A keepalive (an empty request) changes nothing.
  stream.write({});
  await topic.publishMessage({ data: Buffer.from('on the stream') });
  await waitFor(() => responses.some((r) => r.receivedMessages?.length));
  const received = responses.find((r) => r.receivedMessages?.length)!.receivedMessages![0]!;
  expect(received.message!.data!.toString()).toBe('on the stream');
  stream.write({ modifyDeadlineAckIds: [received.ackId], modifyDeadlineSeconds: [120] });
  await waitFor(
    () => (emulator.inspectSubscription(subscription.name)!.messages[0]?.deadline ?? 0) > Date.now() + 60_000,
  );
  stream.write({ ackIds: [received.ackId] });
  await waitFor(() => emulator.inspectSubscription(subscription.name)!.messages.length === 0);
  stream.end();
  await client.close();
});

it('refuses a first request without a valid stream ack deadline (INVALID_ARGUMENT)', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'));
  const client = subscriberClientFor(emulator);
  const stream = client.streamingPull();
  const failed = new Promise<{ code?: number }>((resolve) => stream.on('error', resolve));
  stream.on('data', () => {});
  stream.write({ subscription: subscription.name, streamAckDeadlineSeconds: 0 });
  expect((await failed).code).toBe(3);
  await client.close();
});

it('honours max_outstanding_bytes: a stream with nothing out still takes one large message', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'));
  for (let n = 0; n < 3; n++) await topic.publishMessage({ data: Buffer.alloc(100, n) });
  const client = subscriberClientFor(emulator);
  const stream = client.streamingPull();
  const received: Array<{ ackId?: string }> = [];
  stream.on('data', (response: Response) => received.push(...(response.receivedMessages ?? [])));
  stream.on('error', () => {});
  // 150 bytes: one 100-byte message fits, two do not.
  stream.write({ subscription: subscription.name, streamAckDeadlineSeconds: 10, maxOutstandingBytes: 150 });
  await waitFor(() => received.length === 1);
  expect(emulator.inspectSubscription(subscription.name)!.outstanding).toBe(1);
  stream.write({ ackIds: [received[0]!.ackId] });
  await waitFor(() => received.length === 2);
  expect(emulator.inspectSubscription(subscription.name)!.outstanding).toBe(1);
  stream.write({ ackIds: [received[1]!.ackId] });
  await waitFor(() => received.length === 3);
  stream.write({ ackIds: [received[2]!.ackId] });
  await waitFor(() => emulator.inspectSubscription(subscription.name)!.messages.length === 0);
  stream.end();
  await client.close();
});

// Counting the messages leased in the same pass twice (once as outstanding, once as
// taken) sent a stream about half of its max_outstanding_messages when several were ready
// at once: under flow control every consumer on the emulator ran with half its places.
it('fills max_outstanding_messages in one pass when enough messages are ready', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'));
  for (let n = 0; n < 6; n++) await topic.publishMessage({ data: Buffer.from(String(n)) });
  const client = subscriberClientFor(emulator);
  const stream = client.streamingPull();
  const received: Array<{ ackId?: string }> = [];
  const sizes: number[] = [];
  stream.on('data', (response: Response) => {
    if (response.receivedMessages?.length) sizes.push(response.receivedMessages.length);
    received.push(...(response.receivedMessages ?? []));
  });
  stream.on('error', () => {});
  stream.write({ subscription: subscription.name, streamAckDeadlineSeconds: 10, maxOutstandingMessages: 4 });
  await waitFor(() => received.length >= 4);
  // One pass sends what fits: not 2, then the rest at the next ticks.
  expect(sizes[0]).toBe(4);
  const view = () => emulator.inspectSubscription(subscription.name)!;
  expect(view().outstanding).toBe(4);
  expect(view().ready).toBe(2);
  stream.write({ ackIds: received.map((m) => m.ackId) });
  await waitFor(() => received.length === 6);
  stream.write({ ackIds: received.slice(4).map((m) => m.ackId) });
  await waitFor(() => view().messages.length === 0);
  stream.end();
  await client.close();
});
