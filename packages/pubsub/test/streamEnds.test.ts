import type { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { type PubSubAdapter, publishWithId } from '@oncely/pubsub';
import { Latch, waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// The stream ends with every status the service can end it with while a handler is in
// flight: the message in flight is still settled once (its settlements do not go
// through the stream), the consumer receives again (the client reopens after the
// statuses it retries, the adapter after the others) and says so in its health; and
// stop() ends it for good, also when it is called during a reopen's pause.

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

/**
 * After `stop()`: no stream is open at the emulator and nothing is left that could open
 * one later. That a late reopen does not happen cannot be watched without a clock, so
 * this checks what every reopen needs instead: the adapter's stream is marked closed (the
 * client's 'close' and 'error' events then schedule nothing), its pending reopen and its
 * watchdog (the 5 s check) are cleared. Then a message published after stop() stays in
 * the subscription's backlog: the emulator hands a new message to any open stream at
 * once, so it proves no stream is open at that point (the emulator's own view).
 */
async function expectClosedForGood(
  fixture: AdapterFixture,
  adapter: PubSubAdapter,
  id: string,
): Promise<void> {
  const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
  expect(view().streams).toBe(0);
  expect(adapter.health).toMatchObject({ receiving: false, reopening: false });
  // Private state read on purpose (named in SubscriberStream): the timers are the only
  // way a stream comes back (the pending reopen is `health.reopening` above). Node marks
  // a cleared timer `_destroyed`; a renamed field fails these, it cannot pass them.
  const stream = (adapter as unknown as { stream?: StreamInternals }).stream;
  expect(stream, 'the adapter opened a stream').toBeDefined();
  expect(stream!.closed).toBe(true);
  expect(stream!.watchdog?._destroyed, 'the watchdog is cleared').toBe(true);
  await publishWithId(fixture.topic, { id, body: {} });
  expect(view()).toMatchObject({ streams: 0, ready: 1, outstanding: 0 });
}

/** The fields of SubscriberStream that a reopen goes through. */
interface StreamInternals {
  closed: boolean;
  watchdog?: { _destroyed?: boolean };
}

/** Statuses the client reopens the stream after itself (pull-retry.js), and the others. */
const RETRIED = new Set<number>([
  status.UNAVAILABLE,
  status.DEADLINE_EXCEEDED,
  status.RESOURCE_EXHAUSTED,
  status.CANCELLED,
  status.INTERNAL,
  status.ABORTED,
]);
const STATUSES = [
  status.UNAVAILABLE,
  status.DEADLINE_EXCEEDED,
  status.RESOURCE_EXHAUSTED,
  status.CANCELLED,
  status.INTERNAL,
  status.NOT_FOUND,
  status.PERMISSION_DENIED,
  status.INVALID_ARGUMENT,
  status.FAILED_PRECONDITION,
  status.UNAUTHENTICATED,
];

describe.skipIf(!hasPostgres)('the stream ends while a handler runs', () => {
  for (const code of STATUSES) {
    it(`status ${status[code]}: the message in flight is acked once, the next one is received`, async () => {
      const fixture = await adapterFixture(pubsub, emulator, `end-${code}`);
      const { schema } = fixture;
      const started = new Latch();
      const release = new Latch();
      const { consumer, adapter, events } = fixture.consumer({
        concurrency: 2,
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${schema}".effects (id) VALUES ($1)`, [message.id]);
          if (message.id === 'held') {
            started.open();
            await release.wait();
          }
        },
      });
      const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
      try {
        await consumer.start();
        await publishWithId(fixture.topic, { id: 'held', body: {} });
        await started.wait();
        expect(emulator.endStreams(fixture.subscriptionName, code, `hostile ${status[code]}`)).toBe(1);
        release.open();
        await publishWithId(fixture.topic, { id: 'next', body: {} });
        await waitFor(() => events.count('processed', 'next') === 1, {
          timeoutMs: 30_000,
          description: "'next' processed after the end",
        });
        await waitFor(() => view().ready + view().outstanding === 0, {
          timeoutMs: 30_000,
          description: 'both acked',
        });
        const rows = await fixture.store.transaction((tx) =>
          tx.query<{ id: string }>(`SELECT id FROM "${schema}".effects ORDER BY id`),
        );
        expect(rows.rows.map((r) => r.id)).toEqual(['held', 'next']);
        expect(events.count('ackFailed')).toBe(0);
        expect(events.count('leaseLost')).toBe(0);
        expect(adapter.health.receiving).toBe(true);
        if (!RETRIED.has(code)) {
          expect(adapter.health.streamEnds).toBeGreaterThanOrEqual(1);
          expect(adapter.health.lastStreamError?.code).toBe(code);
        }
      } finally {
        release.open();
        await fixture.drop();
      }
    });
  }

  it('stop() during the pause before a reopen: no stream is opened after it', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'stop-in-pause');
    const { consumer, adapter } = fixture.consumer({ handler: async () => {} });
    const view = () => emulator.inspectSubscription(fixture.subscriptionName);
    try {
      await consumer.start();
      await waitFor(() => view()?.streams === 1, { description: 'the stream open' });
      // The subscription gone: every reopen ends with NOT_FOUND and the pause doubles
      // (200 ms, 400, 800, 1,600, ...), so a pending reopen is easy to catch.
      const id = fixture.subscriptionName.split('/').pop()!;
      await pubsub.subscription(fixture.subscriptionName).delete();
      await waitFor(() => adapter.health.streamEnds >= 4 && adapter.health.reopening, {
        timeoutMs: 30_000,
        description: 'a long pause before the next reopen',
      });
      await consumer.stop();
      expect(adapter.health).toMatchObject({ receiving: false, reopening: false });
      // Back again: a reopen would now succeed, and nothing is left to attempt one.
      await fixture.topic.createSubscription(id, { ackDeadlineSeconds: 10 });
      await expectClosedForGood(fixture, adapter, 'after-stop');
    } finally {
      await fixture.drop();
    }
  });

  it('stop() while the stream ends with NOT_FOUND and a handler runs: settled, nothing reopened', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'stop-at-end');
    const started = new Latch();
    const release = new Latch();
    const { consumer, adapter, events } = fixture.consumer({
      handler: async () => {
        started.open();
        await release.wait();
      },
    });
    const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'held', body: {} });
      await started.wait();
      emulator.endStreams(fixture.subscriptionName, status.NOT_FOUND, 'gone for a moment');
      const stopping = consumer.stop();
      release.open();
      await stopping;
      expect(events.count('processed', 'held')).toBe(1);
      expect(view().ready + view().outstanding).toBe(0);
      await expectClosedForGood(fixture, adapter, 'after-stop');
    } finally {
      release.open();
      await fixture.drop();
    }
  });
});
