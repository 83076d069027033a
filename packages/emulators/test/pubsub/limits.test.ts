import { type PubSub, v1 } from '@google-cloud/pubsub';
import { credentials } from '@grpc/grpc-js';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, codeOf, PROJECT, startEmulator, subscriberClientFor, uniqueName } from './support.js';

// The publish limits of the service (Pub/Sub quotas, "Resource limits"), with the real
// client: at most 100 attributes a message, 1,000 messages a Publish request, 10 MB a
// message (data, attributes and ordering key). A message the emulator accepted beyond
// them would be refused by the service, so a consumer tested here would fail there.

const INVALID_ARGUMENT = 3;

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

const attributes = (count: number) =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`key-${i}`, `value-${i}`]));

function publisherClientFor(target: PubSubEmulator): v1.PublisherClient {
  return new v1.PublisherClient({
    servicePath: target.host,
    port: target.port,
    sslCreds: credentials.createInsecure(),
    projectId: PROJECT,
  });
}

describe('publish limits', () => {
  it('accepts 100 attributes and refuses 101 with INVALID_ARGUMENT', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('attrs'));
    const [subscription] = await topic.createSubscription(uniqueName('attrs-sub'));
    await topic.publishMessage({ data: Buffer.from('x'), attributes: attributes(100) });
    expect(await codeOf(topic.publishMessage({ data: Buffer.from('x'), attributes: attributes(101) }))).toBe(
      INVALID_ARGUMENT,
    );
    const held = emulator.inspectSubscription(subscription.name)!.messages;
    expect(held.map((m) => Object.keys(m.attributes).length)).toEqual([100]);
  });

  it('refuses a Publish request of more than 1,000 messages', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('count'));
    const client = publisherClientFor(emulator);
    const messages = (n: number) => Array.from({ length: n }, (_, i) => ({ data: Buffer.from(String(i)) }));
    try {
      const [accepted] = await client.publish({ topic: topic.name, messages: messages(1000) });
      expect(accepted.messageIds).toHaveLength(1000);
      expect(await codeOf(client.publish({ topic: topic.name, messages: messages(1001) }))).toBe(
        INVALID_ARGUMENT,
      );
    } finally {
      await client.close();
    }
  });

  it('accepts and delivers a message of 10 MB, refuses one over it with INVALID_ARGUMENT', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('size'));
    const [subscription] = await topic.createSubscription(uniqueName('size-sub'));
    // Data plus attribute keys and values count; 10 MB is 10,000,000 bytes.
    const attrs = { a: 'b' };
    await topic.publishMessage({ data: Buffer.alloc(10_000_000 - 2, 7), attributes: attrs });
    expect(
      await codeOf(topic.publishMessage({ data: Buffer.alloc(10_000_000 - 1, 7), attributes: attrs })),
    ).toBe(INVALID_ARGUMENT);
    const client = subscriberClientFor(emulator);
    try {
      const [response] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
      expect(response.receivedMessages?.[0]?.message?.data?.length).toBe(10_000_000 - 2);
    } finally {
      await client.close();
    }
  });
});
