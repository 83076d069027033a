import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, startEmulator, subscriberClientFor, uniqueName } from './support.js';

// An ack or ModifyAckDeadline that reaches the emulator after the deadline but before
// the emulator processed the expiry (it does so on its tick) is honoured: the message
// has not gone out again, its ack ID is still its latest. It lost to the tick before:
// on an exactly-once subscription the ack was refused (PERMANENT_FAILURE_INVALID_ACK_ID)
// and the message came back after it was acked. The clock here is moved by hand and the
// tick never runs on its own, so "after the deadline, before its processing" is exact.

let emulator: PubSubEmulator;
let pubsub: PubSub;
let offsetMs = 0;

beforeAll(async () => {
  emulator = await startEmulator({ now: () => Date.now() + offsetMs, tickMs: 3_600_000 });
  pubsub = clientFor(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

async function pulledPastItsDeadline() {
  const [topic] = await pubsub.createTopic(uniqueName('expiry'));
  const [subscription] = await topic.createSubscription(uniqueName('expiry-sub'), {
    ackDeadlineSeconds: 10,
    enableExactlyOnceDelivery: true,
  });
  await topic.publishMessage({ data: Buffer.from('x') });
  const client = subscriberClientFor(emulator);
  const [response] = await client.pull({ subscription: subscription.name, maxMessages: 1 });
  const ackId = response.receivedMessages![0]!.ackId!;
  // Past the 10 s deadline; the emulator has not processed the expiry yet.
  offsetMs += 11_000;
  const view = () => emulator.inspectSubscription(subscription.name)!;
  expect(view().outstanding).toBe(1);
  return { subscription, client, ackId, view };
}

describe('a settlement that arrives before the expiry was processed', () => {
  it('acks the message (exactly-once: no INVALID, no redelivery)', async () => {
    const { subscription, client, ackId, view } = await pulledPastItsDeadline();
    try {
      await client.acknowledge({ subscription: subscription.name, ackIds: [ackId] });
      expect(view().messages).toHaveLength(0);
    } finally {
      await client.close();
    }
  });

  it('extends the deadline with a ModifyAckDeadline from the call', async () => {
    const { subscription, client, ackId, view } = await pulledPastItsDeadline();
    try {
      await client.modifyAckDeadline({
        subscription: subscription.name,
        ackIds: [ackId],
        ackDeadlineSeconds: 30,
      });
      expect(view().messages[0]!.deadline!).toBeGreaterThan(Date.now() + offsetMs + 20_000);
      // Still its ack ID: the ack goes through.
      await client.acknowledge({ subscription: subscription.name, ackIds: [ackId] });
      expect(view().messages).toHaveLength(0);
    } finally {
      await client.close();
    }
  });
});
