import type { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { publishWithId } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, recordingLogger } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// A consumer must reopen its stream after any end while it runs, not only after the
// statuses the client retries itself: after NOT_FOUND (the subscription deleted and
// recreated) or INVALID_ARGUMENT the client closes its subscriber, and with the close
// timeout the adapter set (0) it never emitted 'close', so nothing reopened it: start()
// had resolved, nothing was received, nothing said so (issue 34, defect 6).

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

describe.skipIf(!hasPostgres)('stream recovery', () => {
  it('processes the next message within 30 s after its subscription was deleted and recreated, without a restart', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'recreated');
    const log = recordingLogger();
    const { consumer, adapter, events } = fixture.consumer({ logger: log, handler: async () => {} });
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'before', body: {} });
      await waitFor(() => events.count('processed', 'before') === 1, { description: "'before' processed" });

      const id = fixture.subscriptionName.split('/').pop()!;
      await pubsub.subscription(fixture.subscriptionName).delete();
      await fixture.topic.createSubscription(id, { ackDeadlineSeconds: 10 });
      await publishWithId(fixture.topic, { id: 'after', body: {} });
      await waitFor(() => events.count('processed', 'after') === 1, {
        timeoutMs: 30_000,
        description: "'after' processed on the recreated subscription",
      });
      // It said so: in its log and in its health.
      expect(log.lines.some((l) => l.level === 'warn' && l.message.includes('stream ended'))).toBe(true);
      expect(adapter.health.streamEnds).toBeGreaterThanOrEqual(1);
      expect(adapter.health.lastStreamError?.code).toBe(status.NOT_FOUND);
      expect(adapter.health.receiving).toBe(true);
    } finally {
      await fixture.drop();
    }
  });

  it('reopens after a stream ends with INVALID_ARGUMENT; stop() ends it for good', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'invalid-end');
    const { consumer, adapter, events } = fixture.consumer({ handler: async () => {} });
    const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
    try {
      await consumer.start();
      await waitFor(() => view().streams > 0, { description: 'the stream open' });
      emulator.endStreams(fixture.subscriptionName, status.INVALID_ARGUMENT, 'refused');
      await publishWithId(fixture.topic, { id: 'next', body: {} });
      await waitFor(() => events.count('processed', 'next') === 1, {
        timeoutMs: 30_000,
        description: "'next' processed after the reopen",
      });
      expect(adapter.health.lastStreamError?.code).toBe(status.INVALID_ARGUMENT);
      await consumer.stop();
      expect(adapter.health.receiving).toBe(false);
      expect(adapter.health.reopening).toBe(false);
      await waitFor(() => view().streams === 0, { description: 'no stream after stop()' });
    } finally {
      await fixture.drop();
    }
  });
});
