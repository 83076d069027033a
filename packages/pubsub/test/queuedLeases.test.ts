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
    const ENOUGH_MS = LEASE_MS / 2 + 1_000;
    const MESSAGES = 12;
    // Per message: the deadline the emulator holds for it from dispatch on, and how it got
    // there. Decided on state, never on how long a renewal took to land.
    const margins = new Map<string, { leftMs: number; via: string }>();
    // Handlers of 1 s, one at a time: dispatches every second, against the adapter's
    // renewals of waiting messages every 5 s, so some come just before one of those. Each
    // handler is then held until its message's margin is known: acked, the message would
    // leave the emulator, and a renewal answered late could no longer be seen.
    const { consumer, events } = fixture.consumer({
      concurrency: 1,
      handler: async (message) => {
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        await waitFor(() => margins.has(message.id), { timeoutMs: 25_000, description: 'margin known' });
      },
    });
    consumer.on('received', (event) => {
      const id = event.messageId!;
      const startedAt = Date.now();
      const view = () =>
        emulator
          .inspectSubscription(fixture.subscriptionName)
          ?.messages.find((m) => m.attributes['message-id'] === id && m.state === 'outstanding');
      const atReceipt = view();
      // The first delivery's verdict stands (a redelivery must not overwrite a lapse).
      const note = (via: string, deadline: number | undefined) => {
        if (margins.has(id)) return;
        margins.set(id, { leftMs: deadline === undefined ? Number.NaN : deadline - startedAt, via });
      };
      if (atReceipt?.deadline === undefined) {
        note('not outstanding at receipt', undefined);
        return;
      }
      if (atReceipt.deadline - startedAt >= ENOUGH_MS) {
        note('enough left at receipt', atReceipt.deadline);
        return;
      }
      // Too little left: the adapter renews it at dispatch. Wait until that renewal has
      // landed (the deadline differs from the one read now), however late it is answered.
      // Broken, nothing lands until the core's keeper renews half a lease after dispatch
      // (its leaseRenewed, read before the deadline, gives it away) or the deadline
      // lapses (a redelivery: a new ack ID).
      void (async () => {
        const giveUpAt = startedAt + 20_000;
        for (;;) {
          const keeperRenewed = events.count('leaseRenewed', id) > 0;
          const now = view();
          if (now === undefined || now.ackId !== atReceipt.ackId) {
            return note('lapsed before any renewal', atReceipt.deadline);
          }
          if (now.deadline !== atReceipt.deadline) {
            return note(keeperRenewed ? 'renewed only by the keeper' : 'renewed at dispatch', now.deadline);
          }
          if (keeperRenewed) return note('renewed only by the keeper', atReceipt.deadline);
          if (Date.now() > giveUpAt) return note('no renewal within 20 s', atReceipt.deadline);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })();
    });
    try {
      await consumer.start();
      for (let i = 0; i < MESSAGES; i++) await publishWithId(fixture.topic, { id: `m${i}`, body: {} });
      await waitFor(() => events.count('processed') === MESSAGES, {
        timeoutMs: 120_000,
        description: 'every message processed',
      });
      const all = [...margins].map(([id, m]) => ({ id, ...m }));
      const tight = all.filter(
        (m) => !['enough left at receipt', 'renewed at dispatch'].includes(m.via) || !(m.leftMs >= ENOUGH_MS),
      );
      expect(tight).toEqual([]);
      expect(all).toHaveLength(MESSAGES);
      expect(events.count('received')).toBe(MESSAGES);
    } finally {
      await fixture.drop();
    }
  }, 180_000);
});
