import { AckError, AckResponses, type Message, type PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, collect, startEmulator, subscriberClientFor, uniqueName, waitFor } from './support.js';

// The fault hooks, with the real client: failSettlements makes the next N Acknowledge /
// ModifyAckDeadline requests fail the way the service fails them (a whole-RPC status, or
// ErrorInfo metadata naming each ack ID, as exactly-once subscriptions answer), and the
// client reads them as it reads the service's (ack-metadata.js, message-queues.js);
// endStreams ends a subscriber's streams with a chosen status.

let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = clientFor(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

/** An exactly-once subscription with one message received by the real client. */
async function receivedOnce(exactlyOnce = true) {
  const [topic] = await pubsub.createTopic(uniqueName('faults'));
  const [subscription] = await topic.createSubscription(uniqueName('faults-sub'), {
    enableExactlyOnceDelivery: exactlyOnce,
  });
  const received = collect(subscription);
  await topic.publishMessage({ data: Buffer.from('x') });
  await waitFor(() => received.length === 1, 30_000, 'the message');
  const message = received[0] as Message;
  const held = () => emulator.inspectSubscription(subscription.name)!;
  return { subscription, message, held };
}

describe('failSettlements', () => {
  it('fails the next acks with UNAVAILABLE; the client retries them and the ack lands after', async () => {
    const { subscription, message, held } = await receivedOnce();
    const outage = emulator.failSettlements({
      rpc: 'Acknowledge',
      subscription: subscription.name,
      count: 2,
      code: status.UNAVAILABLE,
    });
    expect(await message.ackWithResponse()).toBe(AckResponses.Success);
    expect(outage.failed).toBe(2);
    expect(outage.remaining).toBe(0);
    expect(outage.ackIds).toEqual([message.ackId, message.ackId]);
    expect(held().messages).toHaveLength(0);
    await subscription.close();
  });

  it('names the ack ID PERMANENT_FAILURE_INVALID_ACK_ID: AckError INVALID, nothing applied', async () => {
    const { subscription, message, held } = await receivedOnce();
    emulator.failSettlements({
      rpc: 'Acknowledge',
      count: 1,
      ackIdReason: 'PERMANENT_FAILURE_INVALID_ACK_ID',
    });
    const error = await message.ackWithResponse().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AckError);
    expect((error as AckError).errorCode).toBe(AckResponses.Invalid);
    expect(held().outstanding).toBe(1);
    await subscription.close();
  });

  it('fails a request as a whole with FAILED_PRECONDITION: AckError FAILED_PRECONDITION', async () => {
    const { subscription, message, held } = await receivedOnce();
    emulator.failSettlements({ rpc: 'Acknowledge', count: 1, code: status.FAILED_PRECONDITION });
    const error = await message.ackWithResponse().catch((e: unknown) => e);
    expect((error as AckError).errorCode).toBe(AckResponses.FailedPrecondition);
    expect(held().outstanding).toBe(1);
    await subscription.close();
  });

  it('a TRANSIENT_* reason per ack ID is retried by the client; the modAck lands after', async () => {
    const { subscription, message, held } = await receivedOnce();
    const before = held().messages[0]!.deadline!;
    const transient = emulator.failSettlements({
      rpc: 'ModifyAckDeadline',
      ackDeadlineSeconds: 300,
      count: 2,
      ackIdReason: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
    });
    expect(await message.modAckWithResponse(300)).toBe(AckResponses.Success);
    expect(transient.failed).toBe(2);
    expect(held().messages[0]!.deadline!).toBeGreaterThan(before + 200_000);
    await subscription.close();
  });

  it('matches only the RPC, subscription and deadline asked for, and ends on clear()', async () => {
    const { subscription, message, held } = await receivedOnce(false);
    const client = subscriberClientFor(emulator);
    try {
      const renewals = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        subscription: subscription.name,
        ackDeadlineSeconds: 120,
        count: 100,
      });
      const other = emulator.failSettlements({ subscription: `${subscription.name}-other`, count: 100 });
      // Without retries, so that each call is one request.
      const noRetry = { retry: { retryCodes: [], backoffSettings: { totalTimeoutMillis: 5000 } } } as never;
      const renew = () =>
        client
          .modifyAckDeadline(
            { subscription: subscription.name, ackIds: [message.ackId], ackDeadlineSeconds: 120 },
            noRetry,
          )
          .then(
            () => 'ok',
            (e: { code?: number }) => e.code,
          );
      expect(await renew()).toBe(status.UNAVAILABLE);
      expect(await renew()).toBe(status.UNAVAILABLE);
      expect(renewals.failed).toBe(2);
      renewals.clear();
      expect(renewals.remaining).toBe(0);
      expect(await renew()).toBe('ok');
      // Another deadline (a nack) and another subscription were never failed.
      await client.modifyAckDeadline({
        subscription: subscription.name,
        ackIds: [message.ackId],
        ackDeadlineSeconds: 0,
      });
      expect(other.failed).toBe(0);
      other.clear();
      await waitFor(() => held().messages[0]?.deliveries === 2, 30_000, 'the nacked message out again');
    } finally {
      await client.close();
      await subscription.close();
    }
  });
});

describe('failSettlements every', () => {
  it('fails one matching request in every N and lets the others through', async () => {
    const { subscription, message } = await receivedOnce(false);
    const client = subscriberClientFor(emulator);
    try {
      // Only this test's requests (deadline 30 s): the client's own modAcks of the
      // subscription (receipt, lease, nack on close) must not move the count.
      const rate = emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        subscription: subscription.name,
        ackDeadlineSeconds: 30,
        count: 2,
        every: 3,
      });
      const noRetry = { retry: { retryCodes: [], backoffSettings: { totalTimeoutMillis: 5000 } } } as never;
      const results: Array<string | number | undefined> = [];
      for (let i = 0; i < 8; i++) {
        results.push(
          await client
            .modifyAckDeadline(
              { subscription: subscription.name, ackIds: [message.ackId], ackDeadlineSeconds: 30 },
              noRetry,
            )
            .then(
              () => 'ok',
              (e: { code?: number }) => e.code,
            ),
        );
      }
      // The 3rd and 6th fail; then the failure is used up (count 2).
      const U = status.UNAVAILABLE;
      expect(results).toEqual(['ok', 'ok', U, 'ok', 'ok', U, 'ok', 'ok']);
      expect(rate.failed).toBe(2);
      expect(rate.remaining).toBe(0);
      expect(() => emulator.failSettlements({ count: 1, every: 0 })).toThrow(RangeError);
    } finally {
      await client.close();
      await subscription.close();
    }
  });
});

describe('endStreams', () => {
  it('ends the streams with NOT_FOUND: the client closes its subscriber and does not reopen', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('end'));
    const [subscription] = await topic.createSubscription(uniqueName('end-sub'));
    const errors: Array<{ code?: number }> = [];
    subscription.on('error', (error) => errors.push(error));
    subscription.on('message', (m: Message) => m.ack());
    const view = () => emulator.inspectSubscription(subscription.name)!;
    await waitFor(() => view().streams > 0, 30_000, 'the streams open');
    // Every stream: the client closes its subscriber once none is left.
    expect(emulator.endStreams(subscription.name, status.NOT_FOUND, 'gone')).toBeGreaterThan(0);
    await waitFor(() => errors.length > 0, 30_000, "the client's error event");
    expect(errors[0]!.code).toBe(status.NOT_FOUND);
    await waitFor(() => !subscription.isOpen, 30_000, 'the subscriber closed');
    expect(view().streams).toBe(0);
    await subscription.close();
  });

  it('ends the streams with UNAVAILABLE: the client opens a new one', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('end'));
    const [subscription] = await topic.createSubscription(uniqueName('end-sub'));
    const received = collect(subscription, (m) => m.ack());
    const view = () => emulator.inspectSubscription(subscription.name)!;
    await waitFor(() => view().streams > 0, 30_000, 'the streams open');
    emulator.endStreams(subscription.name, status.UNAVAILABLE);
    await topic.publishMessage({ data: Buffer.from('after') });
    await waitFor(() => received.length === 1, 30_000, 'a message on the new stream');
    expect(subscription.isOpen).toBe(true);
    await subscription.close();
  });
});
