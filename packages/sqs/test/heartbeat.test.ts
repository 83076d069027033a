import { silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, heldPolls, send, startEmulator } from './fauxqs.js';
import { type FaultyClient, faultyClient } from './sqsFaults.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Visibility heartbeat under failures (issue 11, SQS 2). A renewal that fails once must
// not declare the lease lost while the visibility still has time left: the adapter
// retries it soon, within what is left. Failures are injected into the real client's
// middleware (an SQS `RequestThrottled` after the SDK gave up); fauxqs serves the rest.

// 4 s, renewed at 2 s: a failed renewal's retry comes ~100 ms later, leaving ~1.9 s for a
// loaded machine's timer and request delays (with 2 s it left ~0.9 s; a retry later than
// that finds the message back in the queue: leaseLost, or a second receipt). The
// two-failures test uses 6 s so that such delays cannot eat the visibility, while a retry
// half a visibility later still loses it.
const VISIBILITY_MS = 4000;
/**
 * How late the message arrives in the long poll: past the point where, counted from the
 * ReceiveMessage call, its renewals would have to have stopped (the visibility less a
 * tenth, SqsDelivery's margin). Counting the first expiry from the call then leaves no time
 * to retry the failed renewal, and the lease is reported lost; counted from the answer it
 * has its whole visibility left.
 */
const LATE_MS = 3600;
const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS visibility heartbeat under failed renewals (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('beat');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  /** A consumer whose handler holds each message until one renewal succeeded (or the lease is lost). */
  async function start(
    name: string,
    faults: FaultyClient,
    broker: Record<string, unknown>,
    visibilityMs = VISIBILITY_MS,
  ) {
    const queue = await emulator.createQueue(name, { VisibilityTimeout: String(visibilityMs / 1000) });
    let spy: ConsumerSpy | undefined;
    const consumer = createSqsConsumer({
      name,
      broker: { queueUrl: queue.url, client: faults.client, visibilityTimeoutMs: visibilityMs, ...broker },
      store: db.store,
      concurrency: 2,
      handlerTimeoutMs: 20_000,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await Promise.race([
          spy!.waitFor('leaseRenewed', (e) => e.event.messageId === message.id, 15_000),
          new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true })),
        ]);
        ctx.signal.throwIfAborted();
        await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
      },
    });
    spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    return { queue, consumer, spy };
  }

  async function settled(spy: ConsumerSpy, id: string) {
    await waitFor(
      () => spy.countFor('processed', id) + spy.countFor('leaseLost', id) + spy.countFor('failed', id) > 0,
      { timeoutMs: 20_000, description: `${id} processed or lost` },
    );
  }

  it('a message that arrives late in a long poll survives one failed renewal', async () => {
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.failNext('ChangeMessageVisibility', 1);
    faults.failNext('ChangeMessageVisibilityBatch', 1);
    // A 20 s poll, so the message surely arrives in the first one however slow the machine;
    // stop() aborts it at the end instead of letting it run out.
    const { queue, consumer, spy } = await start('late', faults, {
      waitTimeSeconds: 20,
      abortPollOnStop: true,
    });
    const held = heldPolls(emulator);
    cleanups.push(() => held.close());
    // Which ReceiveMessage call brought the message in: the scenario holds only if it is
    // the first one, the poll that was already LATE_MS old when the message was sent.
    let receivedByCall: number | undefined;
    consumer.on('received', (event) => {
      if (event.messageId === 'late-1') receivedByCall ??= faults.calls.get('ReceiveMessage');
    });
    await consumer.start();
    // The message arrives at least LATE_MS into the long poll (this pause is the scenario,
    // not a wait for a result): SQS starts its visibility clock when it hands the message
    // out. Counted from the poll held at fauxqs, not from the client's call (which comes
    // before the request is on the wire).
    await waitFor(() => held.count() >= 1, { description: 'a long poll held by fauxqs' });
    await new Promise((resolve) => setTimeout(resolve, LATE_MS));
    // Still the first poll: the message goes to a poll that has waited LATE_MS.
    expect(faults.calls.get('ReceiveMessage')).toBe(1);
    await send(emulator.client, queue.url, [{ id: 'late-1', body: '{}' }]);
    await settled(spy, 'late-1');
    expect(receivedByCall, `the message arrived in the first, ${LATE_MS} ms old, long poll`).toBe(1);
    expect(faults.injected('ChangeMessageVisibility') + faults.injected('ChangeMessageVisibilityBatch')).toBe(
      1,
    );
    expect(spy.count('leaseLost'), spy.summary()).toBe(0);
    expect(spy.countFor('processed', 'late-1')).toBe(1);
    expect(spy.countFor('received', 'late-1')).toBe(1);
    expect(await db.countEffects('late-1')).toBe(1);
  }, 30_000);

  it('two failed renewals in a row are retried within the visibility left, not half a visibility later', async () => {
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.failNext('ChangeMessageVisibility', 2);
    faults.failNext('ChangeMessageVisibilityBatch', 2);
    const { queue, consumer, spy } = await start('twice', faults, { waitTimeSeconds: 1 }, 6000);
    await send(faults.client, queue.url, [{ id: 'twice-1', body: '{}' }]);
    await consumer.start();
    await settled(spy, 'twice-1');
    expect(faults.injected('ChangeMessageVisibility') + faults.injected('ChangeMessageVisibilityBatch')).toBe(
      2,
    );
    expect(spy.count('leaseLost'), spy.summary()).toBe(0);
    expect(spy.countFor('processed', 'twice-1')).toBe(1);
    expect(spy.countFor('received', 'twice-1')).toBe(1);
    expect(await db.countEffects('twice-1')).toBe(1);
  }, 30_000);
});
