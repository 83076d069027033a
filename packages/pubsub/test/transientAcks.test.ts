import type { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { publishWithId } from '@oncely/pubsub';
import { Latch, waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// A short outage of acks and modAcks is not a lost lease. On an exactly-once
// subscription the client gives up a modAck after three transient failures (about 7 s)
// with AckError INVALID ("Retried for too long"), the code it also uses for an invalid
// ack ID, and rethrows it for every later ack of that message; the adapter took INVALID
// for a lost lease, aborted ctx.signal while the lease was still valid and never acked
// the committed message (issue 34, defect 9). Transient failures must be retried through
// the adapter's own calls, with the ack ID, while the lease lasts; only
// PERMANENT_FAILURE_INVALID_ACK_ID is a lost lease. The emulator's failSettlements hook
// fails the requests the way the service does.

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

/** An exactly-once consumer whose handler waits for `release`; its lease is 20 s, renewed every 10 s. */
async function heldConsumer(label: string, stopTimeoutMs = 1_000) {
  const fixture = await adapterFixture(pubsub, emulator, label, {
    ackDeadlineSeconds: 20,
    enableExactlyOnceDelivery: true,
  });
  const started = new Latch();
  const release = new Latch();
  let abortedInHandler: boolean | undefined;
  const { consumer, events } = fixture.consumer({
    stopTimeoutMs,
    handler: async (_message, ctx) => {
      started.open();
      await release.wait();
      abortedInHandler = ctx.signal.aborted;
    },
  });
  const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
  return { fixture, consumer, events, started, release, view, aborted: () => abortedInHandler };
}

describe.skipIf(!hasPostgres)('transient ack and modAck failures (exactly-once)', () => {
  it('retries a renewal through a short outage: no lost lease, ctx.signal intact, acked once', async () => {
    const { fixture, consumer, events, started, release, view, aborted } =
      await heldConsumer('renewal-outage');
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await started.wait();
      const ackId = view().messages[0]!.ackId!;
      // Every renewal (ModifyAckDeadline 20) fails with UNAVAILABLE until cleared.
      const outage = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        subscription: fixture.subscriptionName,
        ackDeadlineSeconds: 20,
        count: 1000,
        code: status.UNAVAILABLE,
      });
      // Three failed tries of the renewal: where the client gives up on a modAck.
      await waitFor(() => outage.ackIds.filter((id) => id === ackId).length >= 3, {
        timeoutMs: 40_000,
        description: 'three failed renewals of the message',
      });
      outage.clear();
      await waitFor(() => events.count('leaseRenewed', 'm1') + events.count('leaseLost', 'm1') > 0, {
        timeoutMs: 30_000,
        description: 'the renewal to land or the lease to be given up',
      });
      expect(events.count('leaseLost', 'm1')).toBe(0);
      release.open();
      await waitFor(() => view().messages.length === 0, { timeoutMs: 30_000, description: 'm1 acked' });
      expect(aborted()).toBe(false);
      expect(events.count('processed', 'm1')).toBe(1);
      expect(events.count('received', 'm1')).toBe(1);
      expect(events.count('ackFailed')).toBe(0);
    } finally {
      release.open();
      await fixture.drop();
    }
  });

  it('retries an ack through transient failures (UNAVAILABLE, then TRANSIENT_* per ack ID)', async () => {
    const { fixture, consumer, events, started, release, view } = await heldConsumer('ack-outage');
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await started.wait();
      const whole = emulator.failSettlements({ rpc: 'Acknowledge', count: 3, code: status.UNAVAILABLE });
      const perId = emulator.failSettlements({
        rpc: 'Acknowledge',
        count: 3,
        ackIdReason: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
      });
      release.open();
      await waitFor(() => view().messages.length === 0, { timeoutMs: 30_000, description: 'm1 acked' });
      expect(whole.failed + perId.failed).toBe(6);
      expect(events.count('ackFailed')).toBe(0);
      expect(events.count('leaseLost')).toBe(0);
      expect(events.count('processed', 'm1')).toBe(1);
    } finally {
      release.open();
      await fixture.drop();
    }
  });

  // Found by the chaos run with acks failing: with exactly-once the client dispatches a
  // message only after its receipt modAck succeeded, and after three transient failures
  // it drops the message without a word. The service still counts it against the
  // stream's flow control until the stream's deadline (60 s with exactly-once): a few of
  // them stopped the consumer for a minute.
  it('takes over a message whose receipt modAck the client gave up after transient failures', async () => {
    const { fixture, consumer, events, release } = await heldConsumer('receipt-outage');
    try {
      release.open();
      await consumer.start();
      // The client's receipt modAck (the 20 s lease) fails three times: it gives up.
      const outage = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        subscription: fixture.subscriptionName,
        ackDeadlineSeconds: 20,
        count: 3,
        code: status.UNAVAILABLE,
      });
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await waitFor(() => events.count('processed', 'm1') === 1, {
        timeoutMs: 40_000,
        description: 'm1 processed (not after the 60 s stream deadline)',
      });
      expect(outage.failed).toBe(3);
      expect(events.count('received', 'm1')).toBe(1);
    } finally {
      release.open();
      await fixture.drop();
    }
  }, 90_000);

  // Retrying while the lease lasts must not hold stop() for the lease (up to 600 s)
  // during an outage: once the consumer closes the adapter, what is still retried is
  // given up (the message comes back, a duplicate for the marker).
  it('does not hold stop() for the lease while an ack is being retried', async () => {
    const { fixture, consumer, events, started, release, view } = await heldConsumer('stop-outage');
    const outage = emulator.failSettlements({
      rpc: 'Acknowledge',
      subscription: fixture.subscriptionName,
      count: 1_000_000,
      code: status.UNAVAILABLE,
    });
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await started.wait();
      release.open();
      await waitFor(() => events.count('processed', 'm1') === 1, { description: 'm1 committed' });
      await waitFor(() => outage.failed >= 2, { description: 'its ack retried' });
      let stopped = false;
      void consumer.stop().then(() => {
        stopped = true;
      });
      // stopTimeoutMs is 1 s here; the lease is 20 s and the outage does not end.
      await waitFor(() => stopped, { timeoutMs: 15_000, description: 'stop() resolved during the outage' });
      expect(view().messages).toHaveLength(1);
    } finally {
      outage.clear();
      release.open();
      await fixture.drop();
    }
  });

  it('takes PERMANENT_FAILURE_INVALID_ACK_ID on a renewal, and only that, for a lost lease', async () => {
    const { fixture, consumer, events, started, release, aborted } = await heldConsumer('invalid-renewal');
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await started.wait();
      // A refused renewal first (FAILED_PRECONDITION, not transient): logged, retried, not a lost lease.
      const refused = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        ackDeadlineSeconds: 20,
        count: 1,
        code: status.FAILED_PRECONDITION,
      });
      await waitFor(() => refused.failed === 1, { timeoutMs: 30_000, description: 'the refused renewal' });
      const invalid = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        ackDeadlineSeconds: 20,
        count: 1,
        ackIdReason: 'PERMANENT_FAILURE_INVALID_ACK_ID',
      });
      await waitFor(() => events.count('leaseLost', 'm1') === 1, {
        timeoutMs: 30_000,
        description: 'the lease lost',
      });
      expect(invalid.failed).toBe(1);
      release.open();
      await waitFor(() => events.count('processed', 'm1') + events.count('failed', 'm1') > 0, {
        timeoutMs: 30_000,
        description: 'the handler run concluded',
      });
      // The lost lease aborted ctx.signal (a handler that goes on may still commit: the
      // marker, not the lease, keeps the effect single).
      expect(aborted()).toBe(true);
    } finally {
      release.open();
      await fixture.drop();
    }
  });
});
