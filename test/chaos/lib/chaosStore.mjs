// The store a chaos run uses: @oncely/postgres on PostgreSQL (the default) or, with
// `--store mysql`, @oncely/mysql on MariaDB / MySQL. Everything the runner and its
// consumers say to the database differs only here: the store's construction, the
// runner's own SQL (the payments table, the counts, the cleanup) and the handler's two
// statements.
import { MySqlStore } from '@oncely/mysql';
import { PostgresStore } from '@oncely/postgres';
import mysql from 'mysql2/promise';
import pg from 'pg';

/** @typedef {'postgres' | 'mysql'} StoreKind */

/** The database URL of a kind (`DATABASE_URL` / `MYSQL_URL`, else the local test servers). */
export function databaseUrlOf(/** @type {StoreKind} */ kind) {
  return kind === 'mysql'
    ? (process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test')
    : (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test');
}

/** The server's port when a URL names none. */
export function defaultPortOf(/** @type {StoreKind} */ kind) {
  return kind === 'mysql' ? 3306 : 5432;
}

/**
 * A store of `kind` at `url` (direct, or through a TCP proxy).
 *
 * @param {StoreKind} kind
 * @param {{ url: string, schema: string, poolMax?: number, logger?: import('@oncely/core').Logger }} options
 * @returns {import('@oncely/core').IdempotencyStore & { migrate(): Promise<unknown>, close(): Promise<void> }}
 */
export function openChaosStore(kind, { url, schema, poolMax, logger }) {
  const common = {
    schema,
    connectTimeoutMs: 2000,
    ...(poolMax ? { poolMax } : {}),
    ...(logger ? { logger } : {}),
  };
  return kind === 'mysql'
    ? new MySqlStore({ url, ...common })
    : new PostgresStore({ connectionString: url, ...common });
}

/**
 * The handler's statements on the payments table: insert one row and return its id, then
 * record the charge on it.
 *
 * @param {StoreKind} kind
 * @param {string} table quoted, qualified
 */
export function paymentStatements(kind, table) {
  if (kind === 'mysql') {
    return {
      /** @param {import('@oncely/core').SqlClient} tx @param {unknown[]} values */
      async insert(tx, values) {
        await tx.query(`INSERT INTO ${table} (order_id, amount_cents, consumer) VALUES (?, ?, ?)`, values);
        // The AUTO_INCREMENT value this connection inserted last: ours.
        const { rows } = await tx.query('SELECT LAST_INSERT_ID() AS id');
        return String(/** @type {{ id: unknown }} */ (rows[0]).id);
      },
      setCharge: `UPDATE ${table} SET charge_id = ? WHERE id = ?`,
    };
  }
  return {
    /** @param {import('@oncely/core').SqlClient} tx @param {unknown[]} values */
    async insert(tx, values) {
      const { rows } = await tx.query(
        `INSERT INTO ${table} (order_id, amount_cents, consumer) VALUES ($1, $2, $3) RETURNING id`,
        values,
      );
      return /** @type {{ id: string }} */ (rows[0]).id;
    },
    setCharge: `UPDATE ${table} SET charge_id = $1 WHERE id = $2`,
  };
}

/**
 * The runner's side of the database: the run's schema, its payments table, the counts
 * the verification reads, and the cleanup.
 *
 * @param {StoreKind} kind
 * @param {string} url
 * @param {string} schema
 */
export function chaosDatabase(kind, url, schema) {
  if (kind === 'mysql') {
    const admin = mysql.createPool({ uri: url, connectionLimit: 3 });
    const payments = `\`${schema}\`.payments`;
    /** @param {string} sql @param {unknown[]} [params] */
    const rows = async (sql, params) => /** @type {any[]} */ ((await admin.query(sql, params))[0]);
    return {
      payments,
      async createPayments() {
        // No unique key on order_id on purpose: a doubled effect shows up as two rows.
        await admin.query(`CREATE TABLE ${payments} (
          id BIGINT AUTO_INCREMENT PRIMARY KEY,
          order_id VARCHAR(200) NOT NULL,
          amount_cents INT NOT NULL,
          charge_id VARCHAR(200),
          consumer VARCHAR(200) NOT NULL,
          paid_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        )`);
      },
      countPayments: async () => Number((await rows(`SELECT COUNT(*) AS n FROM ${payments}`))[0].n),
      paymentsPerOrder: async () =>
        (
          await rows(
            `SELECT order_id, COUNT(*) AS n, MIN(charge_id) AS charge_id FROM ${payments} GROUP BY order_id`,
          )
        ).map((row) => ({ ...row, n: Number(row.n) })),
      countMarkers: async (/** @type {string} */ consumer) =>
        Number(
          (
            await rows(`SELECT COUNT(*) AS n FROM \`${schema}\`.processed_messages WHERE consumer = ?`, [
              consumer,
            ])
          )[0].n,
        ),
      drop: () => admin.query(`DROP DATABASE IF EXISTS \`${schema}\``),
      end: () => admin.end(),
    };
  }
  const admin = new pg.Pool({ connectionString: url, max: 3 });
  // Idle clients die during a PostgreSQL restart: that must not crash the runner.
  admin.on('error', () => {});
  const payments = `"${schema}".payments`;
  return {
    payments,
    async createPayments() {
      // No unique key on order_id on purpose: only the processed marker stands between a
      // redelivery and a second row, so a doubled effect shows up as two rows.
      await admin.query(`CREATE TABLE ${payments} (
        id bigserial PRIMARY KEY,
        order_id text NOT NULL,
        amount_cents integer NOT NULL,
        charge_id text,
        consumer text NOT NULL,
        paid_at timestamptz NOT NULL DEFAULT clock_timestamp()
      )`);
    },
    countPayments: async () => (await admin.query(`SELECT count(*)::int AS n FROM ${payments}`)).rows[0].n,
    paymentsPerOrder: async () =>
      (
        await admin.query(
          `SELECT order_id, count(*)::int AS n, min(charge_id) AS charge_id FROM ${payments} GROUP BY order_id`,
        )
      ).rows,
    countMarkers: async (/** @type {string} */ consumer) =>
      (
        await admin.query(
          `SELECT count(*)::int AS n FROM "${schema}".processed_messages WHERE consumer = $1`,
          [consumer],
        )
      ).rows[0].n,
    drop: () => admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`),
    end: () => admin.end(),
  };
}
