/**
 * Google Pub/Sub on the in-process emulator (@oncely/emulators/pubsub), started in the
 * runner's process (which outlives every consumer); the consumers are child processes
 * reaching it over gRPC. A connection drop ends every StreamingPull stream from the
 * server side (UNAVAILABLE, as the service does); a restart shuts the gRPC server down
 * (every call and connection drops) and listens again after a few seconds with its state
 * kept, as a durable service keeps it. Exactly-once delivery is off unless
 * ONCELY_CHAOS_PUBSUB_EXACTLY_ONCE=1.
 */
import { PubSub } from '@google-cloud/pubsub';
import { startPubSubEmulator } from '@oncely/emulators/pubsub';
import { readDeadLetter } from '@oncely/pubsub';

const PROJECT = 'oncely-chaos';

/**
 * @param {{ runId: string, restartDownMs?: number }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function pubsubBackend({ runId, restartDownMs = 3000 }) {
  const leaseMs = 2000;
  const exactlyOnce = process.env.ONCELY_CHAOS_PUBSUB_EXACTLY_ONCE === '1';
  // 1 s minimum ack deadline: the 2 s chaos lease is below the service's 10 s.
  const emulator = await startPubSubEmulator({ port: 0, minAckDeadlineSeconds: 1 });
  const pubsub = new PubSub({ projectId: PROJECT, apiEndpoint: emulator.address });
  const base = `oncely-chaos-${runId}`.replace(/[^A-Za-z0-9-]/g, '-').slice(0, 200);
  const [topic] = await pubsub.createTopic(base);
  topic.setPublishOptions({ batching: { maxMessages: 500, maxMilliseconds: 10 } });
  const [deadTopic] = await pubsub.createTopic(`${base}-dlq`);
  const [deadSubscription] = await deadTopic.createSubscription(`${base}-dlq-sub`);
  const [subscription] = await topic.createSubscription(`${base}-sub`, {
    ackDeadlineSeconds: leaseMs / 1000,
    enableExactlyOnceDelivery: exactlyOnce,
    // Far above the consumer's maxAttempts (100 is the service's maximum): the consumer,
    // which knows why, dead-letters first; deliveryAttempt is the broker's count.
    deadLetterPolicy: { deadLetterTopic: deadTopic.name, maxDeliveryAttempts: 100 },
  });

  return {
    name: exactlyOnce ? 'pubsub (exactly-once)' : 'pubsub',
    crossProcess: true,
    leaseMs,
    stallMs: Math.round(leaseMs * 1.5),
    leaseLossSlot: true,
    notes: {
      consumers: 'child processes; the Pub/Sub emulator runs in the runner',
      brokerDrop: 'every StreamingPull stream ended by the server (UNAVAILABLE)',
      brokerRestart: `the emulator's gRPC server shut down (every connection dropped) and back after ${restartDownMs} ms, state kept`,
    },
    async consumerBroker() {
      return {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: subscription.name,
      };
    },
    async publish(messages) {
      await Promise.all(
        messages.map((message) =>
          topic.publishMessage({
            data: Buffer.from(message.rawBody ?? JSON.stringify(message.body)),
            attributes: message.id === undefined ? {} : { 'message-id': message.id },
          }),
        ),
      );
    },
    async backlog() {
      const view = emulator.inspectSubscription(subscription.name);
      return view ? view.ready + view.outstanding : 0;
    },
    async deadLetters() {
      return (emulator.inspectSubscription(deadSubscription.name)?.messages ?? []).map((message) => ({
        id: message.attributes['message-id'],
        reason: readDeadLetter(message.attributes)?.reason ?? 'pubsub-dead-letter-policy',
      }));
    },
    async disconnect() {
      const count = emulator.disconnectStreams(subscription.name);
      return `ended ${count} StreamingPull stream(s)`;
    },
    async restart() {
      await emulator.restart({ downMs: restartDownMs });
      return `the emulator was down for ${restartDownMs} ms`;
    },
    async teardown() {
      await pubsub.close().catch(() => {});
      await emulator.stop();
    },
  };
}
