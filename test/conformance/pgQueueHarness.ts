/**
 * Harness of the PostgreSQL-table queue (fixtures/pgQueue.mjs): a broker that outlives a
 * killed process, for the testkit's crossProcess scenarios.
 */
import { randomBytes } from 'node:crypto';
import { PostgresStore } from '@oncely/postgres';
import { type AdapterFeatures, type AdapterHarness, postgresStores } from '@oncely/testkit';
import { PgQueueClient, pgQueueModule } from './fixtures/pgQueue.mjs';
import { DATABASE_URL } from './memoryHarness.js';

export const pgQueueFeatures: AdapterFeatures = {
  redeliveryOnRetry: true,
  delayedRetry: true,
  leaseExtension: true,
  nativeDeadLetter: false,
  deliveryCount: true,
  ordering: 'none',
  competingConsumers: true,
  serverSideDisconnect: true,
  brokerRestart: false,
  brokerDedup: false,
  staleAckDetectable: true,
  crossProcess: true,
};

/** `childModule` defaults to fixtures/pgQueueChild.mjs. */
export function pgQueueHarness(
  childModule = new URL('./fixtures/pgQueueChild.mjs', import.meta.url).href,
): AdapterHarness {
  const tag = randomBytes(4).toString('hex');
  const schema = `oncely_crossprocess_${tag}`;
  return {
    brokerType: 'memory',
    childModule,
    loadAdapter: async () => pgQueueModule,
    // Only the store itself: this harness runs the crash scenarios (5, 6, 17) and the
    // server-side disconnect (13) alone.
    createStore: postgresStores({
      connectionString: DATABASE_URL,
      schema,
      createStore: (connectionString, schema) => new PostgresStore({ connectionString, schema }),
    }).createStore,
    async setup({ name, leaseMs }) {
      // The queue table lives in the store's schema, so it goes when the schema does.
      const table = `"${schema}"."queue_${name.replace(/[^a-z0-9]/gi, '_')}"`;
      // The consumers' connections carry this name, so disconnect() cuts theirs alone.
      const applicationName = `oncely_pgqueue_${tag}_${randomBytes(3).toString('hex')}`;
      const consumerUrl = new URL(DATABASE_URL);
      consumerUrl.searchParams.set('application_name', applicationName);
      const client = new PgQueueClient(DATABASE_URL, table);
      await client.create();
      const lease = leaseMs ?? 5_000;
      return {
        leaseMs: lease,
        async publish(messages) {
          for (const message of messages) {
            await client.publish(message.id, message.rawBody ?? JSON.stringify(message.body));
          }
        },
        brokerConfig: (overrides) => ({
          type: 'memory',
          connectionString: consumerUrl.href,
          table,
          leaseMs: lease,
          ...overrides,
        }),
        deadLetters: () => client.deadLetters(),
        backlog: () => client.backlog(),
        forceRedelivery: (id) => client.forceRedelivery(id),
        // Server-side: PostgreSQL terminates the consumers' sessions, as a broker restart would.
        disconnect: async () => {
          if ((await client.terminate(applicationName)) === 0)
            throw new Error(`disconnect(): no session named ${applicationName} to cut`);
        },
        teardown: () => client.close(),
      };
    },
  };
}
