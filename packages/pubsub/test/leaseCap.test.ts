import type { PubSub } from '@google-cloud/pubsub';
import { isOncelyError, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { createAdapter, publishWithId } from '@oncely/pubsub';
import { Latch, waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// Lease renewal has a cap. The lease keeper aborted ctx.signal at handlerTimeoutMs but
// renewed the ack deadline until the settlement, with no end: a handler that hangs (and
// ignores the signal) held its message for as long as it hung, and no other consumer
// could take it over (issue 34, defect 10). Now renewal stops at broker.maxExtensionMs
// after dispatch (default handlerTimeoutMs + 60 s): the lease lapses and the service
// hands the message out again, while the processed marker keeps the effect single.

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

describe('broker.maxExtensionMs', () => {
  it('is refused below handlerTimeoutMs, naming the field', () => {
    const field = (maxExtensionMs: unknown, handlerTimeoutMs?: number) => {
      try {
        createAdapter(
          { type: 'pubsub', subscription: 'payments', maxExtensionMs },
          { consumerName: 'c', log: silentLogger, handlerTimeoutMs },
        );
        return undefined;
      } catch (error) {
        expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
        return (error as { field?: string }).field;
      }
    };
    expect(field(0)).toBe('broker.maxExtensionMs');
    expect(field(5_000, 10_000)).toBe('broker.maxExtensionMs');
    expect(field(10_000, 10_000)).toBeUndefined();
    expect(field(3_600_000)).toBeUndefined();
  });
});

describe.skipIf(!hasPostgres)('a handler that hangs past handlerTimeoutMs', () => {
  // With flow control sized beyond the handler slots (maxDeferredMessages), messages are
  // received ahead of a free slot and wait in the adapter, their leases kept. Behind a
  // hung handler they waited, renewed, for as long as it hung: no other consumer could
  // take them. The same cap applies to that wait.
  it('gives back, at the cap, a message that waited for a slot a hung handler holds', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'queue-cap');
    const hung = new Latch();
    const release = new Latch();
    const stuck = fixture.consumer({
      concurrency: 1,
      handlerTimeoutMs: 1_000,
      broker: { maxExtensionMs: 3_000 },
      handler: async (message) => {
        if (message.id !== 'hangs') return;
        hung.open();
        await release.wait();
      },
    });
    try {
      await stuck.consumer.start();
      await publishWithId(fixture.topic, { id: 'hangs', body: {} });
      await hung.wait();
      await publishWithId(fixture.topic, { id: 'behind', body: {} });
      // 'behind' is received by the stuck consumer (its reserve) and waits there.
      await waitFor(() => stuck.adapter.stats.received === 2, { description: "'behind' received" });
      const other = fixture.consumer({ concurrency: 2, handler: async () => {} });
      await other.consumer.start();
      await waitFor(() => other.events.count('processed', 'behind') === 1, {
        timeoutMs: 30_000,
        description: "'behind' processed by the other consumer",
      });
      expect(stuck.events.count('processed', 'behind')).toBe(0);
    } finally {
      release.open();
      await fixture.drop();
    }
  });

  it('loses its lease at the cap; the message goes out again and takes effect once', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'lease-cap');
    const hung = new Latch();
    const release = new Latch();
    let runs = 0;
    const { consumer, events } = fixture.consumer({
      concurrency: 2,
      handlerTimeoutMs: 1_000,
      broker: { maxExtensionMs: 3_000 },
      handler: async (message, ctx) => {
        runs++;
        if (runs === 1) {
          hung.open();
          // Ignores ctx.signal, as a hung handler does.
          await release.wait();
        }
        await ctx.tx.query(`INSERT INTO "${fixture.schema}".effects (id) VALUES ($1)`, [message.id]);
      },
    });
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await hung.wait();
      await waitFor(() => events.count('leaseLost', 'm1') === 1, {
        timeoutMs: 30_000,
        description: 'renewal stopped at the cap (leaseLost)',
      });
      // The 10 s lease lapses; the service hands the message out again.
      await waitFor(() => events.count('received', 'm1') === 2, {
        timeoutMs: 30_000,
        description: 'm1 delivered again',
      });
      release.open();
      await waitFor(() => events.count('processed', 'm1') === 1, {
        timeoutMs: 30_000,
        description: 'm1 processed by the second delivery',
      });
      const { rows } = await fixture.store.transaction((tx) =>
        tx.query(`SELECT id FROM "${fixture.schema}".effects`),
      );
      expect(rows).toEqual([{ id: 'm1' }]);
    } finally {
      release.open();
      await fixture.drop();
    }
  });
});
