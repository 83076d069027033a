import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, codeOf, startEmulator, subscriptionPath, topicPath, uniqueName } from './support.js';

// Topic and subscription administration with the real client: the gRPC status codes the
// service returns and its resource-name and field validation.

const NOT_FOUND = 5;
const ALREADY_EXISTS = 6;
const INVALID_ARGUMENT = 3;
const FAILED_PRECONDITION = 9;

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

describe('topics', () => {
  it('creates, gets, lists and deletes a topic', async () => {
    const id = uniqueName('topic');
    const [topic] = await pubsub.createTopic(id);
    expect(topic.name).toBe(topicPath(id));
    const [exists] = await pubsub.topic(id).exists();
    expect(exists).toBe(true);
    const [metadata] = await pubsub.topic(id).getMetadata();
    expect(metadata.name).toBe(topicPath(id));
    const [topics] = await pubsub.getTopics();
    expect(topics.map((t) => t.name)).toContain(topicPath(id));
    await pubsub.topic(id).delete();
    const [after] = await pubsub.topic(id).exists();
    expect(after).toBe(false);
  });

  it('answers ALREADY_EXISTS, NOT_FOUND and INVALID_ARGUMENT', async () => {
    const id = uniqueName('topic');
    await pubsub.createTopic(id);
    expect(await codeOf(pubsub.createTopic(id))).toBe(ALREADY_EXISTS);
    expect(await codeOf(pubsub.topic(uniqueName('missing')).getMetadata())).toBe(NOT_FOUND);
    expect(await codeOf(pubsub.topic(uniqueName('missing')).delete())).toBe(NOT_FOUND);
    expect(await codeOf(pubsub.topic(uniqueName('missing')).publishMessage({ data: Buffer.from('x') }))).toBe(
      NOT_FOUND,
    );
    // Too short, starting with a digit, starting with "goog", a bad character.
    for (const bad of ['ab', '1abc', 'goog-topic', 'has space']) {
      expect(await codeOf(pubsub.createTopic(bad)), bad).toBe(INVALID_ARGUMENT);
    }
    expect(await codeOf(pubsub.createTopic('x'.repeat(256)))).toBe(INVALID_ARGUMENT);
    expect(await codeOf(pubsub.topic(id).publishMessage({ data: Buffer.alloc(0) }))).toBe(INVALID_ARGUMENT);
    expect(
      await codeOf(pubsub.createTopic({ name: uniqueName('t'), messageRetentionDuration: { seconds: 60 } })),
    ).toBe(INVALID_ARGUMENT);
  });

  it('assigns message IDs and publish times', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const [sub] = await topic.createSubscription(uniqueName('sub'));
    const before = Date.now();
    const first = await topic.publishMessage({ data: Buffer.from('a') });
    const second = await topic.publishMessage({ data: Buffer.from('b') });
    expect(first).not.toBe(second);
    const client = (await import('./support.js')).subscriberClientFor(emulator);
    const [response] = await client.pull({ subscription: sub.name, maxMessages: 10 });
    const ids = response.receivedMessages!.map((m) => m.message!.messageId);
    expect(ids).toEqual([first, second]);
    const publishedAt = Number(response.receivedMessages![0]!.message!.publishTime!.seconds) * 1000;
    expect(publishedAt).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    await client.close();
  });
});

describe('subscriptions', () => {
  it('creates, gets, updates, lists and deletes a subscription', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const id = uniqueName('sub');
    const [sub] = await topic.createSubscription(id, {
      ackDeadlineSeconds: 20,
      deadLetterPolicy: { deadLetterTopic: topic.name, maxDeliveryAttempts: 7 },
      retryPolicy: { minimumBackoff: { seconds: 1 }, maximumBackoff: { seconds: 5 } },
      enableExactlyOnceDelivery: true,
      enableMessageOrdering: true,
    });
    const [metadata] = await sub.getMetadata();
    expect(metadata.name).toBe(subscriptionPath(id));
    expect(metadata.topic).toBe(topic.name);
    expect(metadata.ackDeadlineSeconds).toBe(20);
    expect(metadata.deadLetterPolicy?.maxDeliveryAttempts).toBe(7);
    expect(Number(metadata.retryPolicy?.maximumBackoff?.seconds)).toBe(5);
    expect(metadata.enableExactlyOnceDelivery).toBe(true);
    expect(metadata.enableMessageOrdering).toBe(true);
    expect(Number(metadata.messageRetentionDuration?.seconds)).toBe(7 * 24 * 3600);

    const [updated] = await sub.setMetadata({ ackDeadlineSeconds: 30, enableExactlyOnceDelivery: false });
    expect(updated.ackDeadlineSeconds).toBe(30);
    expect(updated.enableExactlyOnceDelivery).toBe(false);

    const [all] = await pubsub.getSubscriptions();
    expect(all.map((s) => s.name)).toContain(subscriptionPath(id));
    const [ofTopic] = await topic.getSubscriptions();
    expect(ofTopic.map((s) => s.name)).toEqual([subscriptionPath(id)]);

    await sub.delete();
    expect(await codeOf(sub.getMetadata())).toBe(NOT_FOUND);
  });

  it('defaults an ack deadline of 0 to 10 s and max delivery attempts of 0 to 5', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const [sub] = await topic.createSubscription(uniqueName('sub'), {
      deadLetterPolicy: { deadLetterTopic: topic.name },
    });
    const [metadata] = await sub.getMetadata();
    expect(metadata.ackDeadlineSeconds).toBe(10);
    expect(metadata.deadLetterPolicy?.maxDeliveryAttempts).toBe(5);
  });

  it('answers ALREADY_EXISTS, NOT_FOUND, INVALID_ARGUMENT and FAILED_PRECONDITION', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const id = uniqueName('sub');
    await topic.createSubscription(id);
    expect(await codeOf(topic.createSubscription(id))).toBe(ALREADY_EXISTS);
    expect(await codeOf(pubsub.topic(uniqueName('missing')).createSubscription(uniqueName('sub')))).toBe(
      NOT_FOUND,
    );
    expect(await codeOf(pubsub.subscription(uniqueName('missing')).getMetadata())).toBe(NOT_FOUND);
    expect(await codeOf(topic.createSubscription('goog-sub'))).toBe(INVALID_ARGUMENT);
    expect(await codeOf(topic.createSubscription(uniqueName('sub'), { ackDeadlineSeconds: 601 }))).toBe(
      INVALID_ARGUMENT,
    );
    expect(
      await codeOf(
        topic.createSubscription(uniqueName('sub'), {
          deadLetterPolicy: { deadLetterTopic: topic.name, maxDeliveryAttempts: 101 },
        }),
      ),
    ).toBe(INVALID_ARGUMENT);
    expect(
      await codeOf(
        topic.createSubscription(uniqueName('sub'), {
          retryPolicy: { minimumBackoff: { seconds: 20 }, maximumBackoff: { seconds: 10 } },
        }),
      ),
    ).toBe(INVALID_ARGUMENT);
    expect(
      await codeOf(
        topic.createSubscription(uniqueName('sub'), { messageRetentionDuration: { seconds: 60 } }),
      ),
    ).toBe(INVALID_ARGUMENT);
    // enable_message_ordering cannot change after creation.
    expect(await codeOf(pubsub.subscription(id).setMetadata({ enableMessageOrdering: true }))).toBe(
      INVALID_ARGUMENT,
    );
    // A detached subscription refuses pulls.
    await pubsub.detachSubscription(id);
    const client = (await import('./support.js')).subscriberClientFor(emulator);
    expect(await codeOf(client.pull({ subscription: subscriptionPath(id), maxMessages: 1 }))).toBe(
      FAILED_PRECONDITION,
    );
    await client.close();
  });

  it('keeps subscriptions of a deleted topic, pointing at _deleted-topic_', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('topic'));
    const [sub] = await topic.createSubscription(uniqueName('sub'));
    await topic.delete();
    const [metadata] = await sub.getMetadata();
    expect(metadata.topic).toBe('_deleted-topic_');
  });
});
