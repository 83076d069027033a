/**
 * The memory broker's conformance harness (see packages/testkit/README.md for the
 * contract): a MemoryBroker per scenario and the real PostgreSQL store in a schema per
 * run.
 */
import { randomBytes } from 'node:crypto';
import { MemoryBroker } from '@oncely/memory';
import { MySqlStore } from '@oncely/mysql';
import { PostgresStore } from '@oncely/postgres';
import {
  type AdapterFeatures,
  type AdapterHarness,
  dialectStores,
  mysqlDialect,
  postgresStores,
} from '@oncely/testkit';
import mysql from 'mysql2/promise';
import pg from 'pg';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

export const memoryFeatures: AdapterFeatures = {
  redeliveryOnRetry: true,
  delayedRetry: true,
  leaseExtension: true,
  nativeDeadLetter: true,
  deliveryCount: true,
  ordering: 'key',
  competingConsumers: true,
  serverSideDisconnect: false,
  brokerRestart: false,
  brokerDedup: false,
  staleAckDetectable: true,
  crossProcess: false,
};

/**
 * `store: 'mysql'` runs the same scenarios on `@oncely/mysql` and the real MariaDB
 * (`MYSQL_URL`); the default is `@oncely/postgres` on the real PostgreSQL.
 */
export function memoryHarness(
  options: { poolMax?: number; store?: 'postgres' | 'mysql' } = {},
): AdapterHarness {
  // One schema per run of this file, dropped only when every scenario passed.
  const schema = `oncely_memory_conformance_${randomBytes(4).toString('hex')}`;
  const poolMax = options.poolMax === undefined ? {} : { poolMax: options.poolMax };
  let admin: mysql.Pool | undefined;
  const stores =
    options.store === 'mysql'
      ? dialectStores({
          url: MYSQL_URL,
          schema,
          defaultPort: 3306,
          sql: mysqlDialect(async (sql) => {
            admin ??= mysql.createPool({ uri: MYSQL_URL, connectionLimit: 2 });
            await admin.query(sql);
          }),
          createStore: (url, schema) => new MySqlStore({ url, schema, connectTimeoutMs: 2000, ...poolMax }),
        })
      : postgresStores({
          connectionString: DATABASE_URL,
          schema,
          // Short connect timeout: while the proxy is cut, connecting is refused at once anyway.
          createStore: (connectionString, schema) =>
            new PostgresStore({ connectionString, schema, connectTimeoutMs: 2000, ...poolMax }),
        });
  return {
    brokerType: 'memory',
    ...stores,
    close: async () => {
      await admin?.end();
    },
    async setup({ name, leaseMs, maxDeliveries, ordered }) {
      // A broker per scenario: nothing leaks between scenarios.
      const broker = new MemoryBroker();
      const queue = name;
      broker.createQueue(queue, {
        visibilityTimeoutMs: leaseMs ?? 30_000,
        ...(maxDeliveries === undefined ? {} : { maxDeliveries }),
        fifo: ordered === true,
      });
      return {
        async publish(messages) {
          for (const message of messages) {
            await broker.send(queue, {
              ...(message.id === undefined ? {} : { id: message.id }),
              // The memory broker passes values through; a raw string is what a JSON consumer must parse.
              body: message.rawBody ?? message.body,
              ...(message.attributes ? { attributes: message.attributes } : {}),
              ...(ordered && message.orderingKey ? { groupId: message.orderingKey } : {}),
            });
          }
        },
        brokerConfig: (overrides) => ({ type: 'memory', broker, queue, pollWaitMs: 5_000, ...overrides }),
        deadLetters: async () =>
          broker.deadLetters(queue).map((d) => ({ id: d.producerMessageId, reason: d.reason })),
        backlog: async () => {
          const stats = broker.stats(queue);
          return stats.visible + stats.inFlight + stats.delayed;
        },
        async forceRedelivery(id) {
          broker.forceRedelivery(queue, id);
        },
        async teardown() {
          broker.close();
        },
      };
    },
  };
}

/** Resolves when MariaDB answers (the probe for requireService). */
export async function probeMySql(): Promise<void> {
  const connection = await mysql.createConnection({ uri: MYSQL_URL, connectTimeout: 3000 });
  try {
    await connection.query('DO 0');
  } finally {
    await connection.end();
  }
}

/** Resolves when PostgreSQL answers (the probe for requireService). */
export async function probePostgres(): Promise<void> {
  const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    await client.query('SELECT 1');
  } finally {
    await client.end();
  }
}
