import type { PubSub } from '@google-cloud/pubsub';
import { isOncelyError } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { diagnose } from '@oncely/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, unique } from './fixture.js';
import { adminClient, PROJECT, postgresAvailable, startEmulator } from './support.js';

// A dead-letter topic that does not exist (a typo in broker.deadLetterTopic, a topic
// deleted since the policy was set) was found only when the first poison message came:
// its copy was refused (NOT_FOUND) on every delivery, an ackFailed and a redelivery every
// lease, for good, and a consumer with no poison message looked healthy. start() checks
// the topic as it checks the subscription; diagnose() reports it.

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
