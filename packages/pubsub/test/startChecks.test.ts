import type { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import { isOncelyError } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { diagnose, publishWithId } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, recordingLogger, unique } from './fixture.js';
import { adminClient, PROJECT, postgresAvailable, startEmulator } from './support.js';

// What start() checks besides the subscription's existence, because it would otherwise
// show only later, as a consumer that loops or never receives:
// - a dead-letter topic that does not exist (a typo in broker.deadLetterTopic, a topic
//   deleted since the policy was set) was found only when the first poison message came:
//   its copy was refused (NOT_FOUND) on every delivery, an ackFailed and a redelivery
//   every lease, for good;
// - a push subscription cannot be pulled (the service answers FAILED_PRECONDITION): the
//   consumer started, then reopened its stream every 10 s for good, receiving nothing.
// diagnose() reports both.

const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

describe.skipIf(!hasPostgres)('a dead-letter topic that does not exist', () => {
  it('broker.deadLetterTopic: start() fails with BROKER_MISCONFIGURED naming it', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'dlq-missing');
    const missing = `projects/${PROJECT}/topics/${unique('no-such-dlq')}`;
    const { consumer } = fixture.consumer({ broker: { deadLetterTopic: missing }, handler: async () => {} });
    try {
      const error = await consumer.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
      expect((error as Error).message).toContain(missing);
    } finally {
      await fixture.drop();
    }
  });

  it("the dead-letter policy's topic, deleted: start() fails naming it; diagnose() reports it", async () => {
    const [deadTopic] = await pubsub.createTopic(unique('dlq-deleted'));
    const fixture = await adapterFixture(pubsub, emulator, 'dlq-deleted', {
      deadLetterPolicy: { deadLetterTopic: deadTopic.name, maxDeliveryAttempts: 10 },
    });
    await deadTopic.delete();
    const { consumer } = fixture.consumer({ handler: async () => {} });
    try {
      const error = await consumer.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
      expect((error as Error).message).toContain(deadTopic.name);
      const report = await diagnose({
        name: 'dlq-deleted',
        broker: fixture.broker,
        store: fixture.store,
        handler: async () => {},
      });
      const finding = report.findings.find((f) => f.message.includes(deadTopic.name) && f.level === 'error');
      expect(finding?.message).toContain('does not exist');
    } finally {
      await fixture.drop();
    }
  });
});

describe.skipIf(!hasPostgres)('a push subscription', () => {
  it('start() fails with BROKER_MISCONFIGURED naming its endpoint; diagnose() reports it', async () => {
    const endpoint = 'https://push.example.com/pubsub';
    const fixture = await adapterFixture(pubsub, emulator, 'push-sub', {
      pushConfig: { pushEndpoint: endpoint },
    });
    const { consumer } = fixture.consumer({ handler: async () => {} });
    try {
      const error = await consumer.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
      expect((error as Error).message).toContain(endpoint);
      const report = await diagnose({
        name: 'push',
        broker: fixture.broker,
        store: fixture.store,
        handler: async () => {},
      });
      expect(report.findings.find((f) => f.level === 'error' && f.message.includes(endpoint))).toBeDefined();
    } finally {
      await fixture.drop();
    }
  });

  it('a detached subscription: start() fails with BROKER_MISCONFIGURED', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'detached');
    await pubsub.detachSubscription(fixture.subscriptionName);
    const { consumer } = fixture.consumer({ handler: async () => {} });
    try {
      const error = await consumer.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
      expect((error as Error).message).toContain('detached');
    } finally {
      await fixture.drop();
    }
  });

  it('made push while running: an error says so, and once it is pull again the consumer receives', async () => {
    const endpoint = 'https://push.example.com/made-push';
    const fixture = await adapterFixture(pubsub, emulator, 'made-push');
    const log = recordingLogger();
    const { consumer, adapter, events } = fixture.consumer({ logger: log, handler: async () => {} });
    const subscription = pubsub.subscription(fixture.subscriptionName);
    try {
      await consumer.start();
      await waitFor(() => emulator.inspectSubscription(fixture.subscriptionName)!.streams === 1, {
        description: 'the stream open',
      });
      await subscription.modifyPushConfig({ pushEndpoint: endpoint });
      await waitFor(() => log.lines.some((l) => l.level === 'error' && l.message.includes(endpoint)), {
        timeoutMs: 30_000,
        description: 'the error naming the endpoint',
      });
      expect(adapter.health.lastStreamError?.code).toBe(status.FAILED_PRECONDITION);
      await subscription.modifyPushConfig({});
      await publishWithId(fixture.topic, { id: 'after', body: {} });
      await waitFor(() => events.count('processed', 'after') === 1, {
        timeoutMs: 30_000,
        description: "'after' processed once the subscription is pull again",
      });
    } finally {
      await fixture.drop();
    }
  });
});
