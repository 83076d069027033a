import { AckError, AckResponses, Duration, type Message, type PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, collect, startEmulator, subscriberClientFor, uniqueName, waitFor } from './support.js';

// Exactly-once delivery with the real client: subscription_properties on the stream, a
// successful ackWithResponse, no redelivery after it, and the per-ack-ID
// PERMANENT_FAILURE_INVALID_ACK_ID the client turns into AckError(INVALID) for a stale
// or expired ack ID.
//
// Short leases: exactly-once raises the client's minimum ack deadline to 60 s; tests
// set the subscriber's minAckDeadline/maxAckDeadline (and the emulator accepts 1 s
// deadlines: minAckDeadlineSeconds) so nothing waits a minute.

let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  // 1 s minimum: the streams here use 2 s deadlines (see above).
  emulator = await startEmulator({ minAckDeadlineSeconds: 1 });
  pubsub = clientFor(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

async function exactlyOnceSubscription(
  options: { clientExtends?: boolean; ackDeadlineSeconds?: number } = {},
) {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'), {
    enableExactlyOnceDelivery: true,
  });
  const seconds = options.ackDeadlineSeconds ?? 2;
  subscription.setOptions({
    minAckDeadline: Duration.from({ seconds }),
    maxAckDeadline: Duration.from({ seconds }),
    // A zero maxExtensionTime drops each message from the client's lease manager at its
    // first extension tick instead of extending it (what the Oncely adapter does).
    ...(options.clientExtends === false ? { maxExtensionTime: Duration.from({ seconds: 0 }) } : {}),
  });
  return { topic, subscription };
}

/**
 * One message pulled twice through the unary client, its lease expired in between: the
 * first pull's ack ID is stale, the second's is the valid one.
 */
async function supersededAckId() {
  const { topic, subscription } = await exactlyOnceSubscription();
  const client = subscriberClientFor(emulator);
  await topic.publishMessage({ data: Buffer.from('x') });
  const [first] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
  const staleId = first.receivedMessages![0]!.ackId!;
  emulator.expireLeases(subscription.name);
  const [second] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
  const latestId = second.receivedMessages![0]!.ackId!;
  return { subscription, client, staleId, latestId };
}

describe('exactly-once delivery (the exactly-once sample)', () => {
  it('tells the client through subscription_properties; ackWithResponse succeeds; no redelivery', async () => {
    const { topic, subscription } = await exactlyOnceSubscription();
    const responses: string[] = [];
    const received = collect(subscription, (m) => {
      m.ackWithResponse().then((r) => responses.push(r));
    });
    await topic.publishMessage({ data: Buffer.from('once') });
    await waitFor(() => responses.length === 1);
    expect(responses).toEqual([AckResponses.Success]);
    // What the client read from subscription_properties.
    expect(
      (subscription as unknown as { _subscriber: { isExactlyOnceDelivery: boolean } })._subscriber
        .isExactlyOnceDelivery,
    ).toBe(true);
    expect(emulator.inspectSubscription(subscription.name)!.messages).toHaveLength(0);
    expect(emulator.expireLeases(subscription.name)).toBe(0);
    expect(received).toHaveLength(1);
    await subscription.close();
  });

  it('rejects the ack of a superseded ack ID with AckError INVALID; only the latest one acks', async () => {
    // The client's own extension is off: it would extend the stale and the latest ack ID
    // in one ModifyAckDeadline, which fails for the stale one, and the Node client then
    // fails the latest one too, as OTHER (the batch test below shows why). Which of the
    // two wins was a race (every 0-1.8 s) this test used to lose now and then.
    const { topic, subscription } = await exactlyOnceSubscription({
      clientExtends: false,
      ackDeadlineSeconds: 30,
    });
    const received = collect(subscription);
    await topic.publishMessage({ data: Buffer.from('x') });
    await waitFor(() => received.length === 1);
    // The lease lapses while the first holder still works: the message goes out again.
    emulator.expireLeases(subscription.name);
    await waitFor(() => received.length === 2);
    const [stale, latest] = received as [Message, Message];
    expect(latest.ackId).not.toBe(stale.ackId);
    const error = await stale.ackWithResponse().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(AckError);
    expect((error as AckError).errorCode).toBe(AckResponses.Invalid);
    expect(await latest.ackWithResponse()).toBe(AckResponses.Success);
    expect(emulator.inspectSubscription(subscription.name)!.messages).toHaveLength(0);
    await subscription.close();
  });

  it('sends PERMANENT_FAILURE_INVALID_ACK_ID in ErrorInfo for stale and expired ack IDs (unary)', async () => {
    const { subscription, client, staleId, latestId } = await supersededAckId();
    const failure = (await client
      .acknowledge({ subscription: subscription.name, ackIds: [staleId] })
      .catch((e: unknown) => e)) as {
      code: number;
      reason: string;
      errorInfoMetadata: Record<string, string>;
    };
    expect(failure.code).toBe(3);
    expect(failure.reason).toBe('EXACTLY_ONCE_ACKID_FAILURE');
    expect(failure.errorInfoMetadata).toEqual({ [staleId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
    const modAckFailure = (await client
      .modifyAckDeadline({ subscription: subscription.name, ackIds: [staleId], ackDeadlineSeconds: 30 })
      .catch((e: unknown) => e)) as { errorInfoMetadata: Record<string, string> };
    expect(modAckFailure.errorInfoMetadata).toEqual({ [staleId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
    // The latest ack ID is still good, until its deadline passes.
    const modAckFrom = Date.now();
    await client.modifyAckDeadline({
      subscription: subscription.name,
      ackIds: [latestId],
      ackDeadlineSeconds: 1,
    });
    // Set to 1 s from the call (not left at the subscription's 10 s): clock reads before and
    // after it bound the deadline either way, so a slow machine cannot break this.
    const [leased] = emulator.inspectSubscription(subscription.name)!.messages;
    expect(leased!.deadline).toBeGreaterThanOrEqual(modAckFrom + 1000);
    expect(leased!.deadline).toBeLessThanOrEqual(Date.now() + 1000);
    // Then the emulator's own expiry, waited for on its state; the timeout only bounds a hang
    // (was 5 s: a loaded machine's late ticks could outlast it).
    await waitFor(() => emulator.inspectSubscription(subscription.name)!.outstanding === 0, 30_000, 'expiry');
    const expired = (await client
      .acknowledge({ subscription: subscription.name, ackIds: [latestId] })
      .catch((e: unknown) => e)) as { errorInfoMetadata: Record<string, string> };
    expect(expired.errorInfoMetadata).toEqual({ [latestId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
    await client.close();
  });

  it('a partly invalid batch: ErrorInfo names only the invalid ack ID, the valid one is applied', async () => {
    // What the service does, and why the Node client's lease manager fails the valid ack
    // IDs of such a batch too: an ack ID without an ErrorInfo entry takes the RPC's code,
    // INVALID_ARGUMENT, which the client files as OTHER (message-queues.js
    // handleAckFailures; googleapis/nodejs-pubsub#1547), though the service applied them.
    const { subscription, client, staleId, latestId } = await supersededAckId();
    const failure = (await client
      .modifyAckDeadline({
        subscription: subscription.name,
        ackIds: [staleId, latestId],
        ackDeadlineSeconds: 0,
      })
      .catch((e: unknown) => e)) as { code: number; errorInfoMetadata: Record<string, string> };
    expect(failure.code).toBe(3);
    expect(failure.errorInfoMetadata).toEqual({ [staleId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
    // The valid ack ID was applied: deadline 0 handed the message back at once.
    expect(emulator.inspectSubscription(subscription.name)!.outstanding).toBe(0);
    const [third] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
    expect(third.receivedMessages).toHaveLength(1);
    await client.close();
  });

  it('does not redeliver while the message is outstanding and its lease is kept', async () => {
    // A 5 s lease: the client extends at a random point of 90 % of it, minus its modAck
    // latency; with 2 s a loaded machine's stall in the last few hundred ms let the lease
    // lapse before the emulator read the extension.
    const { topic, subscription } = await exactlyOnceSubscription({ ackDeadlineSeconds: 5 });
    const received = collect(subscription);
    await topic.publishMessage({ data: Buffer.from('x') });
    await waitFor(() => received.length === 1);
    // The client extends the 5 s lease; after more than two lease lengths there is still one delivery.
    const start = Date.now();
    await waitFor(() => Date.now() - start > 11_000, 20_000);
    expect(received).toHaveLength(1);
    expect(emulator.inspectSubscription(subscription.name)!.messages[0]!.deliveries).toBe(1);
    expect(await received[0]!.ackWithResponse()).toBe(AckResponses.Success);
    await subscription.close();
  });
});
