import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { publishWithId } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// A message that waited in the adapter for a handler slot is handed to the core's lease
// keeper, whose first renewal comes half a lease after dispatch. While it waited, the
// adapter renewed it every half lease, so at dispatch its lease at the service may have
// anything from a full lease down to nothing left: dispatched just before the next of
// those renewals, it was renewed a few ms before its deadline, or after it on a busy
// machine (a redelivery while the handler runs; with exactly-once the lease lost and
// ctx.signal aborted). Every dispatched message must have more than half a lease left.

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

describe.skipIf(!hasPostgres)('leases of messages that waited for a slot', () => {
  it('are more than half a lease from their deadline when their handler starts', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'queued-leases');
    const LEASE_MS = 10_000;
    const MESSAGES = 12;
    // Handlers of 1 s, one at a time: dispatches every second, against the adapter's
    // renewals of waiting messages every 5 s, so some come just before one of those.
    const { consumer, events } = fixture.consumer({
      concurrency: 1,
      handler: async () => {
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      },
    });
    const margins: Array<{ id: string; leftMs: number }> = [];
    consumer.on('received', (event) => {
      const startedAt = Date.now();
      // The margin the emulator holds once a renewal sent at dispatch has landed: read every
      // 100 ms for up to 2 s (a loaded machine may answer the renewal late; one read after
      // 300 ms saw the old deadline), still far less than the 5 s between periodic renewals.
      const read = () =>
        emulator
          .inspectSubscription(fixture.subscriptionName)
          ?.messages.find((m) => m.attributes['message-id'] === event.messageId)?.deadline;
      void (async () => {
        let deadline = read();
        for (
          let i = 0;
          i < 20 && (deadline === undefined || deadline - startedAt < LEASE_MS / 2 + 1_000);
          i++
        ) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          deadline = read() ?? deadline;
        }
        if (deadline !== undefined) margins.push({ id: event.messageId!, leftMs: deadline - startedAt });
      })();
    });
    try {
      await consumer.start();
      for (let i = 0; i < MESSAGES; i++) await publishWithId(fixture.topic, { id: `m${i}`, body: {} });
      await waitFor(() => events.count('processed') === MESSAGES, {
        timeoutMs: 60_000,
        description: 'every message processed',
      });
      await waitFor(() => margins.length === MESSAGES, {
        timeoutMs: 10_000,
        description: 'every margin read',
      });
      const tight = margins.filter((m) => m.leftMs < LEASE_MS / 2 + 1_000);
      expect(tight).toEqual([]);
      expect(events.count('received')).toBe(MESSAGES);
    } finally {
      await fixture.drop();
    }
  }, 90_000);
});
