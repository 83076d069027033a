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
      // Long enough for a renewal sent at dispatch to land; far less than half a lease.
      setTimeout(() => {
        const held = emulator
          .inspectSubscription(fixture.subscriptionName)
          ?.messages.find((m) => m.attributes['message-id'] === event.messageId);
        if (held?.deadline !== undefined)
          margins.push({ id: event.messageId!, leftMs: held.deadline - startedAt });
      }, 300);
    });
    try {
      await consumer.start();
      for (let i = 0; i < MESSAGES; i++) await publishWithId(fixture.topic, { id: `m${i}`, body: {} });
      await waitFor(() => events.count('processed') === MESSAGES, {
        timeoutMs: 60_000,
        description: 'every message processed',
      });
      expect(margins).toHaveLength(MESSAGES);
      const tight = margins.filter((m) => m.leftMs < LEASE_MS / 2 + 1_000);
      expect(tight).toEqual([]);
      expect(events.count('received')).toBe(MESSAGES);
    } finally {
      await fixture.drop();
    }
  }, 90_000);
});
