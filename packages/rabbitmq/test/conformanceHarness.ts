import { randomUUID } from 'node:crypto';
import { MySqlStore } from '@oncely/mysql';
import { PostgresStore } from '@oncely/postgres';
import { assertTopology, REASON_HEADER, retryDelayBucket } from '@oncely/rabbitmq';
import {
  type AdapterFeatures,
  type AdapterHarness,
  dialectStores,
  type HarnessSetup,
  heldProxy,
  mysqlDialect,
  postgresStores,
  requireService,
} from '@oncely/testkit';
import mysql from 'mysql2/promise';
import pg from 'pg';
import {
  closeConnectionsServerSide,
  DATABASE_URL,
  deleteTopology,
  queueDepths,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
} from './helpers.js';

// The harness of the shared adapter conformance suite (shared/CONFORMANCE.md) against the
// real RabbitMQ 3.10: a classic queue on PostgreSQL and a quorum queue on MariaDB. One test
// file each (conformance*.test.ts), so that vitest spreads the runs over its workers (one
// file of three runs was the suite's longest, 373 s).
//
// RabbitMQ has no lease that lapses: a delivery is held for as long as its channel lives.
// So `leaseExtension` is false and "the lease is lost" (scenarios 3 and 8) is forced by
// closing the consumers' connections from the server side (`forceRedelivery`), which
// requeues everything they held, exactly as after a lost ack. Retries go through the
// delay topology, which reorders: `ordering: 'none'`.
export const hasRabbit = await requireService('RabbitMQ', async () => {
  const raw = await rawBroker();
  await raw.close();
});
export const hasPostgres = await requireService('PostgreSQL', async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.end();
});

const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
export const hasMySql = await requireService('MariaDB', async () => {
  const connection = await mysql.createConnection({ uri: MYSQL_URL, connectTimeout: 3000 });
  await connection.end();
});

export const FEATURES: AdapterFeatures = {
  redeliveryOnRetry: true,
  delayedRetry: true,
  leaseExtension: false,
  nativeDeadLetter: true,
  deliveryCount: false,
  ordering: 'none',
  competingConsumers: true,
  serverSideDisconnect: true,
  brokerRestart: false,
  brokerDedup: false,
  staleAckDetectable: true,
  crossProcess: true,
  connectHold: true,
};

/**
 * Every delay the adapter's default ladder can round a retry to, up to two minutes: the
 * delay queues a scenario can have created. Longer ones (no scenario waits that long)
 * expire on their own once idle (`x-expires` on on-demand delay queues).
 */
const RETRY_DELAY_BUCKETS: number[] = [];
for (
  let bucket = retryDelayBucket(1, undefined);
  bucket <= 120_000;
  bucket = retryDelayBucket(bucket + 1, undefined)
)
  RETRY_DELAY_BUCKETS.push(bucket);

/** `store: 'mysql'`: the same scenarios with @oncely/mysql on the real MariaDB. */
export function rabbitHarness(
  queueType: 'classic' | 'quorum',
  store: 'postgres' | 'mysql' = 'postgres',
): AdapterHarness {
  let raw: RawBroker | undefined;
  let admin: mysql.Pool | undefined;
  const broker = async () => {
    raw ??= await rawBroker();
    return raw;
  };
  const schema = `rmq_conf_${randomUUID().replace(/-/g, '').slice(0, 10)}`;
  return {
    brokerType: 'rabbitmq',
    childModule: new URL('./child.mjs', import.meta.url).href,

    ...(store === 'mysql'
      ? dialectStores({
          url: MYSQL_URL,
          schema,
          defaultPort: 3306,
          sql: mysqlDialect(async (sql) => {
            admin ??= mysql.createPool({ uri: MYSQL_URL, connectionLimit: 2 });
            await admin.query(sql);
          }),
          createStore: (url, schema) => new MySqlStore({ url, schema, connectTimeoutMs: 2000 }),
        })
      : postgresStores({
          connectionString: DATABASE_URL,
          schema,
          createStore: (connectionString, schema) =>
            new PostgresStore({ connectionString, schema, connectTimeoutMs: 2000 }),
        })),

    async setup({ name }): Promise<HarnessSetup> {
      const raw = await broker();
      const queue = `oncely_conf_${queueType}_${name.replace(/[^\w.-]/g, '_')}_${randomUUID().slice(0, 8)}`;
      const connectionName = `oncely-conf:${queue}`;
      const channel = await raw.freshChannel();
      // Declared before anything is published (the consumer declares the same on start).
      await assertTopology(channel, { queue, queueType });
      await channel.close();
      // Scenario 3 drops acks while the channel stays open, which RabbitMQ itself never
      // does (an ack is lost only with its channel, and then the broker requeues). Each
      // dropped ack keeps one prefetch credit of the live channel, so with prefetch =
      // concurrency the broker stops delivering after `concurrency` drops, before the
      // scenario forces the redelivery. Give that scenario room for its 10 dropped acks;
      // every other scenario runs with the default prefetch (= concurrency).
      const prefetch = name.startsWith('ack-lost') ? { prefetch: 32 } : {};
      const dead: Array<{ id?: string; reason: string }> = [];
      const setup: HarnessSetup = {
        async publish(messages) {
          for (const message of messages) {
            const content = Buffer.from(message.rawBody ?? JSON.stringify(message.body));
            raw.channel.sendToQueue(queue, content, {
              persistent: true,
              contentType: 'application/json',
              ...(message.id !== undefined ? { messageId: message.id } : {}),
              headers: { ...message.attributes },
            });
          }
          await raw.channel.waitForConfirms();
        },
        brokerConfig(overrides) {
          return {
            type: 'rabbitmq',
            url: RABBITMQ_URL,
            queue,
            queueType,
            connectionName,
            reconnect: { initialMs: 50, maxMs: 1000 },
            ...prefetch,
            ...overrides,
          };
        },
        async deadLetters() {
          // Taken off the dead-letter queue once and remembered: later calls see them too.
          for (const message of await raw.drain(`${queue}.dlq`)) {
            const reason = message.properties.headers?.[REASON_HEADER];
            dead.push({
              id: message.properties.messageId ?? undefined,
              reason: reason === undefined ? '(broker dead-lettered, no reason)' : String(reason),
            });
          }
          return [...dead];
        },
        async backlog() {
          // Ready messages are cheap to read over AMQP; unacked ones (and retry copies
          // waiting in delay queues) only through rabbitmqctl, asked only once nothing is ready.
          if ((await raw.ready(queue)) > 0) return (await raw.ready(queue)) || 1;
          let total = 0;
          for (const [name, messages] of await queueDepths(queue)) {
            if (name === queue || name.startsWith(`${queue}.delay.`)) total += messages;
          }
          return total;
        },
        async forceRedelivery() {
          // "Close the delivering channel": the broker requeues what the consumer held.
          await closeConnectionsServerSide(connectionName);
        },
        async disconnect() {
          await closeConnectionsServerSide(connectionName);
        },
        holdConnections() {
          const url = new URL(RABBITMQ_URL);
          return heldProxy({ host: url.hostname, port: Number(url.port || 5672) }, (port) => {
            url.port = String(port);
            return { url: url.toString() };
          });
        },
        async teardown() {
          // By name, over AMQP (deleting a queue that does not exist is not an error there):
          // listing the queues through rabbitmqctl cost ~1 CPU-s and ~3 s per scenario.
          await deleteTopology(raw, queue, RETRY_DELAY_BUCKETS);
        },
      };
      return setup;
    },

    async close() {
      await raw?.close();
      await admin?.end();
    },
  };
}
