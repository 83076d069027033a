import { randomBytes } from 'node:crypto';
import type { IdempotencyStore, SqlClient } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';

/** The consumers' store of a demo run, with the payments table its handler writes. */
export interface DemoStore {
  store: IdempotencyStore<SqlClient>;
  /** What the status line says it is. */
  description: string;
  /** The handler's INSERT (order_id, amount_cents, charge_id) in the store's dialect. */
  insertPayment: string;
  /** Migrates the store and creates the payments table. */
  prepare(): Promise<void>;
  /** `rows` and distinct `orders` of the payments table. */
  countPayments(): Promise<{ rows: number; orders: number }>;
  /** Closes the store (and drops what the run created on a shared server). */
  close(): Promise<void>;
}

/**
 * Embedded PostgreSQL (PGlite) by default; with a `mysql://` or `mariadb://` URL, the MySQL
 * store (@oncely/mysql) on that server, in a database of the run's own that is dropped at
 * the end. No unique key on order_id on purpose, on either: only Oncely's processed marker
 * stands between a redelivery and a second row.
 */
export async function openDemoStore(storeUrl: string | undefined): Promise<DemoStore> {
  if (storeUrl === undefined) return embeddedStore();
  if (!/^(mysql|mariadb):\/\//i.test(storeUrl)) {
    throw new Error(
      `--store-url must be a mysql:// or mariadb:// URL (without it: embedded PostgreSQL); got ${storeUrl}`,
    );
  }
  return mysqlStore(storeUrl);
}

function embeddedStore(): DemoStore {
  const store = PostgresStore.embedded();
  return {
    store,
    description: 'embedded PostgreSQL (PGlite)',
    insertPayment: 'INSERT INTO payments (order_id, amount_cents, charge_id) VALUES ($1, $2, $3)',
    async prepare() {
      await store.migrate();
      await store.transaction((tx) =>
        tx.query(`CREATE TABLE payments (
          id bigserial PRIMARY KEY,
          order_id text NOT NULL,
          amount_cents integer NOT NULL,
          charge_id text NOT NULL,
          paid_at timestamptz NOT NULL DEFAULT now()
        )`),
      );
    },
    async countPayments() {
      const { rows } = await store.transaction((tx) =>
        tx.query<{ rows: number; orders: number }>(
          'SELECT count(*)::int AS rows, count(DISTINCT order_id)::int AS orders FROM payments',
        ),
      );
      return { rows: rows[0]?.rows ?? 0, orders: rows[0]?.orders ?? 0 };
    },
    close: () => store.close(),
  };
}

async function mysqlStore(url: string): Promise<DemoStore> {
  const [{ MySqlStore }, mysql] = await Promise.all([import('@oncely/mysql'), import('mysql2/promise')]);
  const schema = `oncely_demo_${randomBytes(4).toString('hex')}`;
  const store = new MySqlStore({ url, schema });
  const admin = mysql.createPool({ uri: url.replace(/^mariadb:/i, 'mysql:'), connectionLimit: 1 });
  const payments = `\`${schema}\`.payments`;
  return {
    store,
    description: `the MySQL store (@oncely/mysql) at ${new URL(url).host}, database ${schema}`,
    insertPayment: `INSERT INTO ${payments} (order_id, amount_cents, charge_id) VALUES (?, ?, ?)`,
    async prepare() {
      await store.migrate();
      // DDL on a connection of its own: MySQL commits DDL implicitly, outside any store transaction.
      await admin.query(`CREATE TABLE ${payments} (
        id BIGINT AUTO_INCREMENT PRIMARY KEY,
        order_id VARCHAR(64) NOT NULL,
        amount_cents INT NOT NULL,
        charge_id VARCHAR(64) NOT NULL,
        paid_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
      )`);
    },
    async countPayments() {
      const { rows } = await store.transaction((tx) =>
        tx.query<{ rows: number | string; orders: number | string }>(
          `SELECT COUNT(*) AS \`rows\`, COUNT(DISTINCT order_id) AS orders FROM ${payments}`,
        ),
      );
      return { rows: Number(rows[0]?.rows ?? 0), orders: Number(rows[0]?.orders ?? 0) };
    },
    async close() {
      await store.close();
      await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``).catch(() => {});
      await admin.end();
    },
  };
}
