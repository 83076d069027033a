import { randomUUID } from 'node:crypto';
import { ServiceBusClient, type ServiceBusMessage } from '@azure/service-bus';
import { silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import {
  type AdapterFeatures,
  type AdapterHarness,
  type HarnessSetup,
  heldProxy,
  postgresStores,
  runAdapterConformance,
} from '@oncely/testkit';
import { it } from 'vitest';
import { DATABASE_URL, postgresAvailable } from './support.js';

// The shared adapter conformance suite (shared/CONFORMANCE.md) with the real PostgreSQL
// store, on the Service Bus emulator of @oncely/emulators, started in this process on a
// free port and reached by the real @azure/service-bus client.
//
// Harness choices:
// - One queue per scenario, LockDuration = the scenario's lease, MaxDeliveryCount = its
//   maxDeliveries (else 10), duplicate detection on (window 5 min): producer duplicates
//   are dropped by the broker (`brokerDedup`). Ordered scenarios get a session queue,
//   one session per ordering key.
// - IDs: published as the MessageId *and* the `message-id` application property, and the
//   suite's consumers read the property ({ attribute: 'message-id' }). Service Bus gives
//   a message sent without a MessageId one of its own, so under the adapter's default
//   'producer' strategy a message can never lack an ID; the attribute strategy is what
//   lets scenario 10 publish one that does. The 'producer' strategy is covered by
//   test/adapter.test.ts.
// - Dead letters are read from the emulator's `$DeadLetterQueue` (reason = DeadLetterReason).
// - forceRedelivery expires the message's lock in the emulator (what a lapsed lock does).
// - disconnect() drops every client connection from the server side.

const hasPostgres = await postgresAvailable();

const FEATURES: AdapterFeatures = {
  redeliveryOnRetry: true,
  delayedRetry: true,
  leaseExtension: true,
  nativeDeadLetter: true,
  deliveryCount: true,
  ordering: 'key',
  competingConsumers: true,
  serverSideDisconnect: true,
  brokerRestart: true,
  brokerDedup: true,
  staleAckDetectable: true,
  crossProcess: true,
  connectHold: true,
};

const ID_PROPERTY = 'message-id';

async function createHarness(): Promise<AdapterHarness> {
  const emulator: ServiceBusEmulator = await startServiceBusEmulator({ port: 0 });
  const client = new ServiceBusClient(emulator.connectionString);
  const schema = `oncely_sb_conf_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  return {
    brokerType: 'servicebus',
    idStrategy: { attribute: ID_PROPERTY },
    childModule: new URL('./conformanceChild.mjs', import.meta.url).href,
    ...postgresStores({
      connectionString: DATABASE_URL,
      schema,
      createStore: (connectionString, schema) =>
        new PostgresStore({ connectionString, schema, logger: silentLogger }),
    }),
    async setup({ name, leaseMs, maxDeliveries, ordered }): Promise<HarnessSetup> {
      const queue = `${name.replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 40)}-${randomUUID().slice(0, 8)}`;
      const lease = leaseMs ?? 10_000;
      emulator.createQueue(queue, {
        LockDuration: lease,
        MaxDeliveryCount: maxDeliveries ?? 10,
        RequiresSession: ordered ?? false,
        RequiresDuplicateDetection: true,
        DuplicateDetectionHistoryTimeWindow: 'PT5M',
      });
      const sender = client.createSender(queue);
      const idOf = (properties: Record<string, unknown> | undefined) => {
        const id = properties?.[ID_PROPERTY];
        return typeof id === 'string' ? id : undefined;
      };
      return {
        leaseMs: lease,
        brokerConfig: (overrides = {}) => ({
          type: 'servicebus',
          connectionString: emulator.connectionString,
          queueName: queue,
          sessions: ordered ?? false,
          maxWaitTimeMs: 500,
          ...overrides,
        }),
        async publish(messages) {
          let batch = await sender.createMessageBatch();
          for (const m of messages) {
            const message: ServiceBusMessage = {
              body: Buffer.from(m.rawBody ?? JSON.stringify(m.body)),
              applicationProperties: {
                ...(m.attributes ?? {}),
                ...(m.id === undefined ? {} : { [ID_PROPERTY]: m.id }),
              },
              ...(m.id === undefined ? {} : { messageId: m.id }),
              ...(ordered ? { sessionId: m.orderingKey ?? 'default' } : {}),
            };
            if (!batch.tryAddMessage(message)) {
              await sender.sendMessages(batch);
              batch = await sender.createMessageBatch();
              batch.tryAddMessage(message);
            }
          }
          if (batch.count > 0) await sender.sendMessages(batch);
        },
        async deadLetters() {
          return emulator.messages(`${queue}/$DeadLetterQueue`).map((m) => ({
            id: idOf(m.application_properties),
            reason: String(m.application_properties?.DeadLetterReason ?? 'unknown'),
          }));
        },
        async backlog() {
          return emulator.inspect(queue).total;
        },
        async forceRedelivery(id) {
          emulator.expireLocks(queue, (m) => idOf(m.application_properties) === id);
        },
        async disconnect() {
          emulator.disconnect();
        },
        holdConnections() {
          const endpoint = /Endpoint=sb:\/\/([^:;/]+):(\d+)/.exec(emulator.connectionString);
          if (!endpoint) throw new Error(`no host:port in ${emulator.connectionString}`);
          const [whole, host, port] = endpoint as unknown as [string, string, string];
          return heldProxy({ host, port: Number(port) }, (proxyPort) => ({
            connectionString: emulator.connectionString.replace(whole, `Endpoint=sb://${host}:${proxyPort}`),
          }));
        },
        async restart() {
          await emulator.restart({ downMs: 200 });
        },
        async teardown() {
          await sender.close().catch(() => {});
          emulator.deleteQueue(queue);
        },
      };
    },
    async close() {
      await client.close();
      await emulator.stop();
    },
  };
}

// Debugging aid: SERVICEBUS_CONFORMANCE_ONLY=4,11 runs just those scenarios.
const only = process.env.SERVICEBUS_CONFORMANCE_ONLY?.split(',').map(Number);

if (!hasPostgres) {
  it.skip('Service Bus adapter conformance [skipped: PostgreSQL is not reachable]', () => {});
} else {
  runAdapterConformance({
    name: 'Service Bus adapter conformance (@oncely/emulators servicebus + PostgreSQL)',
    features: FEATURES,
    createHarness,
    only,
  });
}
