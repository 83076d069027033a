import { randomUUID } from 'node:crypto';
import { silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { PostgresStore } from '@oncely/postgres';
import { readDeadLetter } from '@oncely/pubsub';
import {
  type AdapterFeatures,
  type AdapterHarness,
  type HarnessSetup,
  heldProxy,
  postgresStores,
} from '@oncely/testkit';
import { adminClient, DATABASE_URL, PROJECT, startEmulator } from './support.js';

// The conformance harness on the in-process emulator, with exactly-once delivery on or off.
//
// - Every subscription has a dead-letter policy (maxDeliveryAttempts = the scenario's
//   maxDeliveries, at least the service's minimum of 5, else 10) to its own topic, so the
//   service counts deliveries (deliveryAttempt) and the adapter dead-letters there with
//   the reason; a subscription on that topic is read through the emulator's inspection.
// - Leases are the subscription's ack deadline, in whole seconds. The emulator runs with
//   a 1 s minimum (the service's is 10 s) because the lease scenarios (long handler,
//   lease lost, crash before ack) ask for 1–2 s leases: at 10 s each would wait ten
//   times as long. The adapter reads the lease from the subscription, so nothing here
//   sets an ackDeadlineSeconds the adapter would refuse.
// - forceRedelivery lets the ack deadline of the message's outstanding deliveries lapse
//   (emulator hook); disconnect ends the StreamingPull streams from the server side with
//   UNAVAILABLE; restart restarts the emulator on its port, keeping its state.

/** What the service declares, with or without exactly-once delivery. */
export function features(exactlyOnce: boolean): AdapterFeatures {
  return {
    redeliveryOnRetry: true,
    delayedRetry: true,
    leaseExtension: true,
    nativeDeadLetter: true,
    deliveryCount: true,
    ordering: 'key',
    competingConsumers: true,
    serverSideDisconnect: true,
    brokerRestart: true,
    brokerDedup: false,
    // Only exactly-once subscriptions reject a stale ack ID; others accept it silently.
    staleAckDetectable: exactlyOnce,
    crossProcess: true,
    connectHold: true,
  };
}

export async function createHarness(exactlyOnce: boolean): Promise<AdapterHarness> {
  const emulator: PubSubEmulator = await startEmulator({ minAckDeadlineSeconds: 1 });
  const pubsub = adminClient(emulator);
  const schema = `oncely_pubsub_conf_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  return {
    brokerType: 'pubsub',
    childModule: new URL('./conformanceChild.mjs', import.meta.url).href,
    ...postgresStores({
      connectionString: DATABASE_URL,
      schema,
      createStore: (connectionString, schema) =>
        new PostgresStore({ connectionString, schema, logger: silentLogger }),
    }),
    async setup({ name, leaseMs, maxDeliveries, ordered }): Promise<HarnessSetup> {
      const ackDeadlineSeconds = Math.max(1, Math.ceil((leaseMs ?? 10_000) / 1000));
      const base = `t-${name.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 60)}-${randomUUID().slice(0, 6)}`;
      const [topic] = await pubsub.createTopic(base);
      if (ordered) topic.setPublishOptions({ messageOrdering: true });
      const [deadTopic] = await pubsub.createTopic(`${base}-dlq`);
      const [deadSubscription] = await deadTopic.createSubscription(`${base}-dlq-sub`);
      const [subscription] = await topic.createSubscription(`${base}-sub`, {
        ackDeadlineSeconds,
        enableExactlyOnceDelivery: exactlyOnce,
        enableMessageOrdering: !!ordered,
        deadLetterPolicy: {
          deadLetterTopic: deadTopic.name,
          maxDeliveryAttempts: Math.min(100, Math.max(5, maxDeliveries ?? 10)),
        },
      });
      const setup: HarnessSetup = {
        leaseMs: ackDeadlineSeconds * 1000,
        brokerConfig: (overrides = {}) => ({
          type: 'pubsub',
          projectId: PROJECT,
          apiEndpoint: emulator.address,
          subscription: subscription.name,
          ...overrides,
        }),
        async publish(messages) {
          const publishes = messages.map((m) =>
            topic.publishMessage({
              data: Buffer.from(m.rawBody ?? JSON.stringify(m.body)),
              attributes: { ...(m.attributes ?? {}), ...(m.id !== undefined ? { 'message-id': m.id } : {}) },
              ...(ordered && m.orderingKey ? { orderingKey: m.orderingKey } : {}),
            }),
          );
          await Promise.all(publishes);
        },
        async deadLetters() {
          const view = emulator.inspectSubscription(deadSubscription.name);
          return (view?.messages ?? []).map((m) => ({
            id: m.attributes['message-id'],
            reason: readDeadLetter(m.attributes)?.reason ?? 'pubsub-dead-letter-policy',
          }));
        },
        async backlog() {
          const view = emulator.inspectSubscription(subscription.name);
          return view ? view.ready + view.outstanding : undefined;
        },
        async forceRedelivery(id) {
          emulator.expireLeases(subscription.name, (m) => m.attributes['message-id'] === id);
        },
        async disconnect() {
          emulator.disconnectStreams(subscription.name);
        },
        holdConnections() {
          const [, host = '127.0.0.1', port] = /^(.*):(\d+)$/.exec(emulator.address) ?? [];
          return heldProxy(
            { host, port: Number(port) },
            (proxyPort) => ({ apiEndpoint: `${host}:${proxyPort}` }),
            {
              // Seen on this branch: a consumer started and stopped the ordinary way (no
              // stop during start) still has one connection open to the emulator 25 s
              // after stop() resolved, its PubSub client closed. Left for its own fix.
              connectionsOutliveClose:
                'the adapter leaves one gRPC connection open after an ordinary start and stop (open issue)',
            },
          );
        },
        async restart() {
          await emulator.restart();
        },
        async teardown() {
          for (const s of [subscription, deadSubscription]) await s.delete().catch(() => {});
          for (const t of [topic, deadTopic]) await t.delete().catch(() => {});
        },
      };
      return setup;
    },
    async close() {
      await pubsub.close();
      await emulator.stop();
    },
  };
}
