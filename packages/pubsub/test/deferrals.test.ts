import type { PubSub } from '@google-cloud/pubsub';
import { isOncelyError, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { createAdapter, publishWithId } from '@oncely/pubsub';
import { Latch, waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, recordingLogger, unique } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// A message waiting out a retry backoff (no retry policy: its ack deadline is set to the
// delay) or parked (a poison message and no dead-letter topic: a 600 s deadline) stays
// outstanding at the service. With the stream's max_outstanding_messages equal to the
// concurrency, one such message with the default concurrency of 1 stopped the whole
// subscription for the backoff, or for good. And the 600 s park was overwritten ~10 ms
// later by the client's receipt modAck: the message came back after one lease (issue 34,
// defect 8). The assertions are on the order of events, not on the clock.

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

describe('broker.maxDeferredMessages', () => {
  it('is an integer from 0 to 10,000', () => {
    const field = (maxDeferredMessages: unknown) => {
      try {
        createAdapter(
          { type: 'pubsub', subscription: 'payments', maxDeferredMessages },
          { consumerName: 'c', log: silentLogger },
        );
        return undefined;
      } catch (error) {
        expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
        return (error as { field?: string }).field;
      }
    };
    expect(field(-1)).toBe('broker.maxDeferredMessages');
    expect(field(10_001)).toBe('broker.maxDeferredMessages');
    expect(field(0)).toBeUndefined();
    expect(field(100)).toBeUndefined();
  });
});

describe.skipIf(!hasPostgres)('messages waiting out a backoff or parked, concurrency 1', () => {
  it('a failing message in backoff does not hold back a healthy one behind it', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'backoff-blocks');
    const [deadTopic] = await pubsub.createTopic(unique('backoff-blocks-dlq'));
    const { consumer, events } = fixture.consumer({
      broker: { deadLetterTopic: deadTopic.name },
      concurrency: 1,
      maxAttempts: 2,
      // One backoff step: 20 s. The healthy message must not wait for it.
      backoff: { initialMs: 20_000, maxMs: 20_000 },
      handler: async (message) => {
        if (message.id === 'failing') throw new Error('always fails');
      },
    });
    try {
      await publishWithId(fixture.topic, { id: 'failing', body: {} });
      await consumer.start();
      await waitFor(() => events.count('retried', 'failing') === 1, { description: "'failing' in backoff" });
      await publishWithId(fixture.topic, { id: 'healthy', body: {} });
      await waitFor(() => events.count('processed', 'healthy') === 1, {
        timeoutMs: 60_000,
        description: "'healthy' processed",
      });
      // Before the failing message's second attempt, i.e. within one backoff step.
      expect(events.count('received', 'failing')).toBe(1);
    } finally {
      await fixture.drop();
    }
  }, 120_000);

  // More poison messages than the reserve and the handler slots, and no dead-letter
  // topic: every place the service may fill is held by a parked message, each comes back
  // after 600 s as poison as it went and is parked again, so the consumer receives
  // nothing new for good. The README promised that healthy messages wait "until their
  // deadlines pass", and the adapter's health said receiving: true. Nothing can free the
  // consumer but a dead-letter topic: it must at least say so, loudly and in its health.
  it('a poison flood with no dead-letter topic: health says stalled, an error says why, nothing is lost', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'poison-flood');
    const log = recordingLogger();
    const { consumer, adapter, events } = fixture.consumer({
      concurrency: 1,
      maxAttempts: 1,
      logger: log,
      handler: async (message) => {
        if (message.id !== 'healthy') throw new Error('poison');
      },
    });
    const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
    try {
      await consumer.start();
      for (let i = 0; i < 100; i += 10) {
        await Promise.all(
          Array.from({ length: 10 }, (_, j) =>
            publishWithId(fixture.topic, { id: `poison-${i + j}`, body: {} }),
          ),
        );
      }
      await publishWithId(fixture.topic, { id: 'healthy', body: {} });
      // The default reserve (10) and the one handler slot: 11 places.
      await waitFor(() => events.count('ackFailed') === 11, { timeoutMs: 30_000, description: '11 parked' });
      await waitFor(() => adapter.health.stalled, { description: 'health: stalled' });
      expect(adapter.health).toMatchObject({ receiving: true, deferred: 11, parked: 11, stalled: true });
      expect(
        log.lines.some(
          (l) =>
            l.level === 'error' && l.message.includes('parked') && l.message.includes('dead-letter topic'),
        ),
      ).toBe(true);
      expect(events.count('processed', 'healthy')).toBe(0);
      await consumer.stop();
      // Nothing lost: every message is still at the service.
      expect(view().messages).toHaveLength(101);
    } finally {
      await fixture.drop();
    }
  }, 120_000);

  // The core's lease keeper renews until the settlement is confirmed, so a renewal can be
  // on its way (retried through a transient failure) while the delivery is retried later
  // or parked: landing after the park, it set the deadline back to one lease.
  it('a renewal still retried when the message is parked does not overwrite the park', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'renewal-vs-park');
    const started = new Latch();
    let renewalFailures: { failed: number } | undefined;
    const { consumer, events } = fixture.consumer({
      concurrency: 1,
      maxAttempts: 1,
      handler: async () => {
        started.open();
        // Fail once a renewal of the keeper's has failed: it is being retried (100 ms,
        // then 200, 400) while the failure parks the message.
        await waitFor(() => (renewalFailures?.failed ?? 0) >= 1, { timeoutMs: 30_000 });
        throw new Error('poison');
      },
    });
    const parked = () =>
      emulator
        .inspectSubscription(fixture.subscriptionName)!
        .messages.find((m) => m.attributes['message-id'] === 'p');
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'p', body: {} });
      await started.wait();
      // After the keeper's first renewal (so the client's receipt modAck, also 10 s, is
      // long answered), its renewals fail; the park (600 s) never does.
      await waitFor(() => events.count('leaseRenewed', 'p') >= 1, { description: 'the first renewal' });
      renewalFailures = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        subscription: fixture.subscriptionName,
        ackDeadlineSeconds: 10,
        count: 3,
      });
      await waitFor(() => events.count('ackFailed', 'p') === 1, {
        description: 'parked (no dead-letter topic)',
      });
      await waitFor(() => renewalFailures!.failed === 3, { description: 'the renewal failed three times' });
      // The renewal's fourth try (after 400 ms) would land now: the park must still hold.
      const parkedAt = Date.now();
      await waitFor(() => Date.now() - parkedAt > 2_000 || parked()!.deadline! - Date.now() < 500_000, {
        description: 'two seconds, or the park overwritten',
      });
      expect(parked()!.deadline! - Date.now()).toBeGreaterThan(500_000);
    } finally {
      await fixture.drop();
    }
  }, 60_000);

  it('a parked poison message does not hold back a healthy one, and stays parked for 600 s', async () => {
    // No dead-letter topic anywhere: a poison message is parked.
    const fixture = await adapterFixture(pubsub, emulator, 'parked-blocks');
    const { consumer, events } = fixture.consumer({ concurrency: 1, handler: async () => {} });
    const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
    try {
      // No message-id attribute: a poison message ('missing-id').
      await fixture.topic.publishMessage({ data: Buffer.from('{}'), attributes: { poison: 'yes' } });
      await consumer.start();
      await waitFor(() => events.count('ackFailed') === 1, { description: 'the poison message parked' });
      await publishWithId(fixture.topic, { id: 'healthy', body: {} });
      await waitFor(() => events.count('processed', 'healthy') === 1, {
        timeoutMs: 60_000,
        description: "'healthy' processed",
      });
      expect(events.count('received')).toBe(2);
      // The park was not overwritten by the client's receipt modAck (the 10 s lease).
      const parked = view().messages.find((m) => m.attributes.poison === 'yes')!;
      expect(parked.state).toBe('outstanding');
      expect(parked.deliveries).toBe(1);
      expect(parked.deadline! - Date.now()).toBeGreaterThan(500_000);
    } finally {
      await fixture.drop();
    }
  }, 120_000);
});
