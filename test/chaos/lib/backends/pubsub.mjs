/**
 * Google Pub/Sub on the in-process emulator (@oncely/emulators/pubsub), started in the
 * runner's process (which outlives every consumer); the consumers are child processes
 * reaching it over gRPC. A connection drop ends every StreamingPull stream from the
 * server side (UNAVAILABLE, as the service does); a restart shuts the gRPC server down
 * (every call and connection drops) and listens again after a few seconds with its state
 * kept, as a durable service keeps it. Exactly-once delivery is off unless
 * ONCELY_CHAOS_PUBSUB_EXACTLY_ONCE=1.
 *
 * With ONCELY_CHAOS_PUBSUB_ACK_FAULTS=1, acks and modAcks also fail transiently all run
 * long: every ACK_FAULT_EVERY_MS the emulator fails every Acknowledge or
 * ModifyAckDeadline request (in turn) for ACK_FAULT_WINDOW_MS, with UNAVAILABLE, and with
 * exactly-once also with TRANSIENT_FAILURE_UNORDERED_ACK_ID per ack ID, the way the
 * service answers a short outage. (A window, not a number of requests: at the end of a
 * run, when few requests are left, a fixed number of them is every request for seconds.)
 * `notes.ackFaults` says how many requests failed.
 */
import { PubSub } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import { startPubSubEmulator } from '@oncely/emulators/pubsub';
import { readDeadLetter } from '@oncely/pubsub';

const PROJECT = 'oncely-chaos';
/** A short outage of one kind of settlement request every this often... */
const ACK_FAULT_EVERY_MS = 2000;
/** ...lasting this long: shorter than the lease (2 s or 5 s), so a retry with the ack ID can land. */
const ACK_FAULT_WINDOW_MS = 400;

/**
 * @param {{ runId: string, restartDownMs?: number }} input
 * @returns {Promise<import('./types.mjs').Backend>}
 */
export async function pubsubBackend({ runId, restartDownMs = 3000 }) {
  const exactlyOnce = process.env.ONCELY_CHAOS_PUBSUB_EXACTLY_ONCE === '1';
  // 5 s with exactly-once: there an ack ID dies with its lease, and every modAck is a round
  // trip the client waits for. At 2 s, a machine under load (scripts/ci-under-load.sh,
  // fresh clone of 160546f) lost 174 leases of 734 receipts to late modAcks, redelivered
  // them, and the run collapsed to 3 orders a second: 651 of 1,000 left at its deadline.
  const leaseMs = exactlyOnce ? 5000 : 2000;
  // 1 s minimum ack deadline: the chaos leases are below the service's 10 s.
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

  const ackFaults =
    process.env.ONCELY_CHAOS_PUBSUB_ACK_FAULTS === '1'
      ? injectAckFaults(emulator, subscription.name, exactlyOnce)
      : undefined;
  const notes = {
    consumers: 'child processes; the Pub/Sub emulator runs in the runner',
    brokerDrop: 'every StreamingPull stream ended by the server (UNAVAILABLE)',
    brokerRestart: `the emulator's gRPC server shut down (every connection dropped) and back after ${restartDownMs} ms, state kept`,
  };
  const variant = [exactlyOnce ? 'exactly-once' : '', ackFaults ? 'acks failing' : '']
    .filter(Boolean)
    .join(', ');
  return {
    name: variant ? `pubsub (${variant})` : 'pubsub',
    crossProcess: true,
    leaseMs,
    stallMs: Math.round(leaseMs * 1.5),
    leaseLossSlot: true,
    notes,
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
      if (ackFaults) notes.ackFaults = ackFaults.stop();
      await pubsub.close().catch(() => {});
      await emulator.stop();
    },
  };
}

/**
 * Fails bursts of ack and modAck requests transiently for as long as the run lasts.
 * `stop()` ends it and says how many requests failed (`<n> ack/modAck requests failed
 * transiently (...)`, the count first).
 *
 * @param {import('@oncely/emulators/pubsub').PubSubEmulator} emulator
 * @param {string} subscription
 * @param {boolean} exactlyOnce
 */
function injectAckFaults(emulator, subscription, exactlyOnce) {
  /** @type {Array<{ kind: string, failure: import('@oncely/emulators/pubsub').SettlementFailureHandle }>} */
  const bursts = [];
  const kinds = [
    { kind: 'Acknowledge UNAVAILABLE', rpc: 'Acknowledge', code: status.UNAVAILABLE },
    { kind: 'ModifyAckDeadline UNAVAILABLE', rpc: 'ModifyAckDeadline', code: status.UNAVAILABLE },
    // Per ack ID: only exactly-once subscriptions answer that way.
    ...(exactlyOnce
      ? [
          {
            kind: 'Acknowledge TRANSIENT_*',
            rpc: 'Acknowledge',
            ackIdReason: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
          },
          {
            kind: 'ModifyAckDeadline TRANSIENT_*',
            rpc: 'ModifyAckDeadline',
            ackIdReason: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
          },
        ]
      : []),
  ];
  let next = 0;
  const timer = setInterval(() => {
    const { kind, ...spec } = kinds[next++ % kinds.length];
    const failure = emulator.failSettlements({ ...spec, subscription, count: 1_000_000 });
    bursts.push({ kind, failure });
    setTimeout(() => failure.clear(), ACK_FAULT_WINDOW_MS).unref();
  }, ACK_FAULT_EVERY_MS);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      /** @type {Record<string, number>} */
      const byKind = {};
      let failed = 0;
      for (const { kind, failure } of bursts) {
        failure.clear();
        byKind[kind] = (byKind[kind] ?? 0) + failure.failed;
        failed += failure.failed;
      }
      const detail = Object.entries(byKind)
        .map(([kind, n]) => `${kind} ${n}`)
        .join(', ');
      return `${failed} ack/modAck requests failed transiently in ${bursts.length} outages of ${ACK_FAULT_WINDOW_MS} ms (${detail})`;
    },
  };
}
