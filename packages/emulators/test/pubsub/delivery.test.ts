import { Duration, type Message, type PubSub } from '@google-cloud/pubsub';
import { type PubSubEmulator, startPubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, collect, startEmulator, subscriberClientFor, uniqueName, waitFor } from './support.js';

// Leases and delivery with the real client: StreamingPull, unary Pull, ack deadlines,
// redelivery with a fresh ack ID, nack, flow control, and the server-side test hooks
// (stream cancellation, stream timeout, restart keeping state).

let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  // 1 s minimum: the deadline tests use 1–3 s stream and subscription deadlines so that
  // a lapse takes seconds (the service's minimum is 10 s).
  emulator = await startEmulator({ minAckDeadlineSeconds: 1 });
  pubsub = clientFor(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

async function topicAndSubscription(options: Record<string, unknown> = {}) {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'), options);
  return { topic, subscription };
}

describe('streaming pull', () => {
  it('delivers published messages with data, attributes and IDs; an ack removes them', async () => {
    const { topic, subscription } = await topicAndSubscription();
    const received = collect(subscription, (m) => m.ack());
    const ids = await Promise.all(
      [1, 2, 3].map((n) =>
        topic.publishMessage({ data: Buffer.from(`m${n}`), attributes: { n: String(n) } }),
      ),
    );
    await waitFor(() => received.length === 3);
    expect(received.map((m) => m.id).sort()).toEqual([...ids].sort());
    expect(received.map((m) => m.attributes.n).sort()).toEqual(['1', '2', '3']);
    // Without a dead-letter policy the service sends no delivery attempt (the client reads 0).
    expect(received.every((m) => m.deliveryAttempt === 0)).toBe(true);
    await waitFor(() => emulator.inspectSubscription(subscription.name)!.messages.length === 0);
    await subscription.close();
  });

  it('redelivers a nacked message at once with a fresh ack ID', async () => {
    const { topic, subscription } = await topicAndSubscription();
    const received = collect(subscription, (m) => (received.length === 1 ? m.nack() : m.ack()));
    await topic.publishMessage({ data: Buffer.from('x') });
    await waitFor(() => received.length === 2);
    expect(received[1]!.id).toBe(received[0]!.id);
    expect(received[1]!.ackId).not.toBe(received[0]!.ackId);
    await subscription.close();
  });

  it('honours max_outstanding_messages of the stream request', async () => {
    const { topic, subscription } = await topicAndSubscription();
    subscription.setOptions({
      flowControl: { maxMessages: 2, allowExcessMessages: false },
      streamingOptions: { maxStreams: 1 },
    });
    const held: Message[] = [];
    collect(subscription, (m) => held.push(m));
    await Promise.all([1, 2, 3, 4, 5].map((n) => topic.publishMessage({ data: Buffer.from(String(n)) })));
    await waitFor(() => held.length === 2);
    const view = () => emulator.inspectSubscription(subscription.name)!;
    expect(view().outstanding).toBe(2);
    expect(view().ready).toBe(3);
    held[0]!.ack();
    await waitFor(() => held.length === 3);
    expect(view().outstanding).toBe(2);
    for (const m of held.slice(1)) m.ack();
    await waitFor(() => held.length === 5);
    for (const m of held.slice(3)) m.ack();
    await waitFor(() => view().messages.length === 0);
    await subscription.close();
  });

  it('gives messages the stream ack deadline; modAck counts from the call', async () => {
    const { topic, subscription } = await topicAndSubscription();
    // The client opens its streams with a 10 s deadline and modAcks each message on
    // receipt with its own ack deadline (10 s); with min and max set it uses 3 s.
    subscription.setOptions({
      minAckDeadline: Duration.from({ seconds: 3 }),
      maxAckDeadline: Duration.from({ seconds: 3 }),
    });
    const received = collect(subscription);
    await topic.publishMessage({ data: Buffer.from('x') });
    await waitFor(() => received.length === 1);
    // The receipt modAck (3 s) lands shortly after delivery.
    await waitFor(() => {
      const deadline = emulator.inspectSubscription(subscription.name)!.messages[0]!.deadline!;
      return Math.abs(deadline - Date.now() - 3000) < 500;
    });
    received[0]!.ack();
    await subscription.close();
  });

  it('redelivers when the deadline lapses (test hook), with a fresh ack ID', async () => {
    const { topic, subscription } = await topicAndSubscription();
    const received = collect(subscription, (m) => received.length > 1 && m.ack());
    await topic.publishMessage({ data: Buffer.from('x') });
    await waitFor(() => received.length === 1);
    expect(emulator.expireLeases(subscription.name)).toBe(1);
    await waitFor(() => received.length === 2);
    expect(received[1]!.ackId).not.toBe(received[0]!.ackId);
    await subscription.close();
  });

  it('reconnects after a server-side stream cancellation', async () => {
    const { topic, subscription } = await topicAndSubscription();
    const received = collect(subscription, (m) => m.ack());
    await topic.publishMessage({ data: Buffer.from('before') });
    await waitFor(() => received.length === 1);
    const streams = emulator.inspectSubscription(subscription.name)!.streams;
    expect(emulator.disconnectStreams(subscription.name)).toBe(streams);
    await topic.publishMessage({ data: Buffer.from('after') });
    await waitFor(() => received.length === 2, 30_000, 'delivery after reconnect');
    expect(received[1]!.data.toString()).toBe('after');
    expect(emulator.inspectSubscription(subscription.name)!.streams).toBeGreaterThan(0);
    await subscription.close();
  });

  it('keeps topics, subscriptions and messages across a restart', async () => {
    const own = await startEmulator();
    const client = clientFor(own);
    const [topic] = await client.createTopic(uniqueName('topic'));
    const [subscription] = await topic.createSubscription(uniqueName('sub'));
    const received = collect(subscription, (m) => m.ack());
    await topic.publishMessage({ data: Buffer.from('one') });
    await waitFor(() => received.length === 1);
    const port = own.port;
    await own.restart();
    expect(own.port).toBe(port);
    await topic.publishMessage({ data: Buffer.from('two') });
    await waitFor(() => received.length === 2, 20_000, 'delivery after restart');
    const [exists] = await subscription.exists();
    expect(exists).toBe(true);
    await subscription.close();
    await client.close();
    await own.stop();
  });

  it('closes streams after the server timeout; the client reopens them', async () => {
    const lines: string[] = [];
    const own = await startPubSubEmulator({ port: 0, streamTimeoutMs: 300, log: (line) => lines.push(line) });
    const client = clientFor(own);
    const [topic] = await client.createTopic(uniqueName('topic'));
    const [subscription] = await topic.createSubscription(uniqueName('sub'));
    subscription.setOptions({ streamingOptions: { maxStreams: 1 } });
    const received = collect(subscription, (m) => m.ack());
    await waitFor(
      () => lines.filter((l) => l.startsWith('stream opened')).length >= 3,
      30_000,
      'reopened streams',
    );
    await topic.publishMessage({ data: Buffer.from('late') });
    await waitFor(() => received.length === 1);
    await subscription.close();
    await client.close();
    await own.stop();
  });
});

describe('unary pull (the synchronous-pull sample)', () => {
  it('pulls, lets the deadline lapse, gets a fresh ack ID; a stale ack is ignored without exactly-once', async () => {
    // A 60 s deadline, lapsed through the emulator's test hook: with a real 1 s deadline the
    // redelivery's own 1 s lease raced the stale ack and the inspection below on a loaded
    // machine (natural expiry by the clock is covered by the leasing tests).
    const { topic, subscription } = await topicAndSubscription({ ackDeadlineSeconds: 60 });
    const client = subscriberClientFor(emulator);
    await topic.publishMessage({ data: Buffer.from('x') });
    const [first] = await client.pull({ subscription: subscription.name, maxMessages: 10 });
    expect(first.receivedMessages).toHaveLength(1);
    const firstAck = first.receivedMessages![0]!.ackId!;
    expect(emulator.expireLeases(subscription.name)).toBe(1);
    // The deadline has lapsed; the next pull gets the message again.
    let second: typeof first | undefined;
    for (let i = 0; i < 50 && !second?.receivedMessages?.length; i++) {
      [second] = await client.pull({ subscription: subscription.name, maxMessages: 10 });
    }
    const again = second!.receivedMessages![0]!;
    expect(again.message!.messageId).toBe(first.receivedMessages![0]!.message!.messageId);
    expect(again.ackId).not.toBe(firstAck);
    await client.acknowledge({ subscription: subscription.name, ackIds: [firstAck] });
    expect(emulator.inspectSubscription(subscription.name)!.outstanding).toBe(1);
    await client.acknowledge({ subscription: subscription.name, ackIds: [again.ackId!] });
    expect(emulator.inspectSubscription(subscription.name)!.messages).toHaveLength(0);
    await client.close();
  });

  it('modifyAckDeadline extends from the call; 0 nacks', async () => {
    const { topic, subscription } = await topicAndSubscription();
    const client = subscriberClientFor(emulator);
    await topic.publishMessage({ data: Buffer.from('x') });
    const [pulled] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
    const ackId = pulled.receivedMessages![0]!.ackId!;
    const before = Date.now();
    await client.modifyAckDeadline({
      subscription: subscription.name,
      ackIds: [ackId],
      ackDeadlineSeconds: 120,
    });
    const deadline = emulator.inspectSubscription(subscription.name)!.messages[0]!.deadline!;
    expect(deadline).toBeGreaterThanOrEqual(before + 120_000);
    expect(deadline).toBeLessThanOrEqual(Date.now() + 120_000);
    await client.modifyAckDeadline({
      subscription: subscription.name,
      ackIds: [ackId],
      ackDeadlineSeconds: 0,
    });
    expect(emulator.inspectSubscription(subscription.name)!.ready).toBe(1);
    const code = await client
      .modifyAckDeadline({ subscription: subscription.name, ackIds: [ackId], ackDeadlineSeconds: 601 })
      .then(() => 0)
      .catch((error: { code: number }) => error.code);
    expect(code).toBe(3);
    await client.close();
  });

  it('answers an empty pull after the wait', async () => {
    const { subscription } = await topicAndSubscription();
    const client = subscriberClientFor(emulator);
    const [response] = await client.pull({ subscription: subscription.name, maxMessages: 5 });
    expect(response.receivedMessages ?? []).toHaveLength(0);
    await client.close();
  });
});
