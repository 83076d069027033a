import type { Message, PubSub } from '@google-cloud/pubsub';
import { type PubSubEmulator, startPubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, collect, startEmulator, subscriberClientFor, uniqueName, waitFor } from './support.js';

// Delivery policies with the real client: dead-letter policy and delivery attempts,
// retry-policy backoff, ordering keys (in order per key, later messages of a key
// redelivered after a nack or an expiry), message retention.

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

describe('dead-letter policy (the dead-letter sample)', () => {
  it('counts delivery attempts and forwards to the dead-letter topic after max_delivery_attempts', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const [deadTopic] = await pubsub.createTopic(uniqueName('dead'));
    const [deadSubscription] = await deadTopic.createSubscription(uniqueName('dead-sub'));
    const [subscription] = await topic.createSubscription(uniqueName('sub'), {
      deadLetterPolicy: { deadLetterTopic: deadTopic.name, maxDeliveryAttempts: 5 },
    });
    const attempts: number[] = [];
    collect(subscription, (m) => {
      attempts.push(m.deliveryAttempt);
      m.nack();
    });
    const dead = collect(deadSubscription, (m) => m.ack());
    await topic.publishMessage({ data: Buffer.from('poison'), attributes: { kind: 'poison' } });
    await waitFor(() => dead.length === 1, 30_000, 'dead letter');
    expect(attempts).toEqual([1, 2, 3, 4, 5]);
    const forwarded = dead[0]!;
    expect(forwarded.data.toString()).toBe('poison');
    expect(forwarded.attributes.kind).toBe('poison');
    expect(forwarded.attributes.CloudPubSubDeadLetterSourceDeliveryCount).toBe('5');
    expect(forwarded.attributes.CloudPubSubDeadLetterSourceSubscription).toBe(
      subscription.name.split('/').pop(),
    );
    expect(emulator.inspectSubscription(subscription.name)!.messages).toHaveLength(0);
    await subscription.close();
    await deadSubscription.close();
  });

  it('counts a lapsed deadline as an attempt (synchronous pull with delivery attempts)', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const [subscription] = await topic.createSubscription(uniqueName('sub'), {
      deadLetterPolicy: { deadLetterTopic: topic.name, maxDeliveryAttempts: 5 },
    });
    const client = subscriberClientFor(emulator);
    await topic.publishMessage({ data: Buffer.from('x') });
    const [first] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
    expect(first.receivedMessages![0]!.deliveryAttempt).toBe(1);
    emulator.expireLeases(subscription.name);
    const [second] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
    expect(second.receivedMessages![0]!.deliveryAttempt).toBe(2);
    await client.acknowledge({
      subscription: subscription.name,
      ackIds: [second.receivedMessages![0]!.ackId!],
    });
    await client.close();
  });
});

describe('retry policy', () => {
  it('delays redelivery after a nack by the exponential backoff', async () => {
    // On the emulator's own clock, frozen and moved by the test: each backoff is read off
    // the message (availableAt − now) exactly. Measured as gaps between deliveries on the
    // wall clock, the cap (600 ms, not 1200) needed an upper bound a busy machine exceeded.
    let now = Date.now();
    const own = await startEmulator({ now: () => now });
    const ownPubSub = clientFor(own);
    try {
      const [topic] = await ownPubSub.createTopic(uniqueName('topic'));
      const [subscription] = await topic.createSubscription(uniqueName('sub'), {
        retryPolicy: {
          minimumBackoff: { seconds: 0, nanos: 300_000_000 },
          maximumBackoff: { seconds: 0, nanos: 600_000_000 },
        },
      });
      let deliveries = 0;
      collect(subscription, (m) => {
        deliveries++;
        if (deliveries < 4) m.nack();
        else m.ack();
      });
      await topic.publishMessage({ data: Buffer.from('x') });
      const backoffs: number[] = [];
      for (let n = 1; n <= 3; n++) {
        // The n-th nack reached the emulator: the message is back in backoff.
        let availableAt: number | undefined;
        await waitFor(
          () => {
            const m = own.inspectSubscription(subscription.name)?.messages[0];
            availableAt = m?.state === 'ready' && m.deliveries === n ? m.availableAt : undefined;
            return availableAt !== undefined;
          },
          30_000,
          `nack ${n} at the emulator`,
        );
        backoffs.push(availableAt! - now);
        now = availableAt!;
      }
      // 300 ms, 600 ms, then capped at 600 ms instead of 1200 ms.
      expect(backoffs).toEqual([300, 600, 600]);
      await waitFor(() => deliveries === 4, 30_000, 'the fourth delivery');
      await subscription.close();
    } finally {
      await ownPubSub.close();
      await own.stop();
    }
  });
});

describe('ordering keys (the ordered publishing sample)', () => {
  it('delivers in publish order per key over a stream', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    topic.setPublishOptions({ messageOrdering: true });
    const [subscription] = await topic.createSubscription(uniqueName('sub'), { enableMessageOrdering: true });
    const seen = new Map<string, number[]>();
    let nackedOnce = false;
    const received = collect(subscription, (m) => {
      const n = Number(m.data.toString());
      // One nack in the middle of key k1: it and every later k1 message come back.
      if (m.orderingKey === 'k1' && n === 3 && !nackedOnce) {
        nackedOnce = true;
        m.nack();
        return;
      }
      const key = m.orderingKey ?? '';
      seen.set(key, [...(seen.get(key) ?? []), n]);
      m.ack();
    });
    const publishes: Promise<string>[] = [];
    for (let n = 1; n <= 6; n++) {
      for (const key of ['k1', 'k2']) {
        publishes.push(topic.publishMessage({ data: Buffer.from(String(n)), orderingKey: key }));
      }
    }
    await Promise.all(publishes);
    // The client dispatches a key's batch at once, so 4–6 may be acked before the nack of
    // 3 arrives: the service brings them back anyway. Done when everything is settled.
    await waitFor(() => nackedOnce && emulator.inspectSubscription(subscription.name)!.messages.length === 0);
    expect(seen.get('k2')).toEqual([1, 2, 3, 4, 5, 6]);
    // After the nack the stream restarted at 3: the last 4 entries are 3..6 in order.
    expect(seen.get('k1')!.slice(-4)).toEqual([3, 4, 5, 6]);
    expect(received.length).toBeGreaterThan(12);
    await subscription.close();
  });

  it('redelivers the later (even acked) messages of a key after a nack, and holds the key meanwhile', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    topic.setPublishOptions({ messageOrdering: true });
    const [subscription] = await topic.createSubscription(uniqueName('sub'), { enableMessageOrdering: true });
    for (const [key, data] of [
      ['k1', 'a'],
      ['k1', 'b'],
      ['k2', 'x'],
      ['k1', 'c'],
      ['k2', 'y'],
    ] as const) {
      await topic.publishMessage({ data: Buffer.from(data), orderingKey: key });
    }
    const client = subscriberClientFor(emulator);
    const pull = async () => {
      const [response] = await client.pull({ subscription: subscription.name, maxMessages: 10 });
      return (response.receivedMessages ?? []).map((m) => ({
        data: m.message!.data!.toString(),
        ackId: m.ackId!,
      }));
    };
    const first = await pull();
    expect(first.map((m) => m.data)).toEqual(['a', 'b', 'x', 'c', 'y']);
    const byData = new Map(first.map((m) => [m.data, m.ackId]));
    // While k1's messages are out, nothing more of k1 is delivered.
    await client.acknowledge({
      subscription: subscription.name,
      ackIds: [byData.get('a')!, byData.get('c')!],
    });
    await client.acknowledge({
      subscription: subscription.name,
      ackIds: [byData.get('x')!, byData.get('y')!],
    });
    await client.modifyAckDeadline({
      subscription: subscription.name,
      ackIds: [byData.get('b')!],
      ackDeadlineSeconds: 0,
    });
    const second = await pull();
    // b and the already acked c come back, in order; a and k2 do not.
    expect(second.map((m) => m.data)).toEqual(['b', 'c']);
    // An expiry does the same as a nack.
    emulator.expireLeases(subscription.name, (m) => m.data.toString() === 'b');
    const third = await pull();
    expect(third.map((m) => m.data)).toEqual(['b', 'c']);
    await client.acknowledge({ subscription: subscription.name, ackIds: third.map((m) => m.ackId) });
    expect(emulator.inspectSubscription(subscription.name)!.messages).toHaveLength(0);
    await client.close();
  });
});

describe('message shape', () => {
  it('keeps the ordering key and attributes on delivery', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    topic.setPublishOptions({ messageOrdering: true });
    const [subscription] = await topic.createSubscription(uniqueName('sub'), { enableMessageOrdering: true });
    const received: Message[] = collect(subscription, (m) => m.ack());
    await topic.publishMessage({ data: Buffer.from('x'), orderingKey: 'key-1', attributes: { a: 'b' } });
    await waitFor(() => received.length === 1);
    expect(received[0]!.orderingKey).toBe('key-1');
    expect(received[0]!.attributes).toEqual({ a: 'b' });
    await subscription.close();
  });
});

describe('message retention', () => {
  it('drops a message not acked within message_retention_duration', async () => {
    // The emulator's clock is moved forward instead of waiting ten minutes.
    let offsetMs = 0;
    const own = await startPubSubEmulator({ port: 0, now: () => Date.now() + offsetMs });
    const client = clientFor(own);
    const [topic] = await client.createTopic(uniqueName('topic'));
    const [subscription] = await topic.createSubscription(uniqueName('sub'), {
      messageRetentionDuration: { seconds: 600 },
    });
    await topic.publishMessage({ data: Buffer.from('old') });
    offsetMs = 300_000;
    await topic.publishMessage({ data: Buffer.from('new') });
    expect(own.inspectSubscription(subscription.name)!.messages).toHaveLength(2);
    // Eleven minutes after the first publish: only the second is still retained.
    offsetMs = 660_000;
    await waitFor(() => own.inspectSubscription(subscription.name)!.messages.length === 1);
    expect(own.inspectSubscription(subscription.name)!.messages[0]!.data.toString()).toBe('new');
    await client.close();
    await own.stop();
  });
});
