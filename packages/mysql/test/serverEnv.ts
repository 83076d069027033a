import { randomUUID } from 'node:crypto';
import { requireService, type SqlDialect } from '@oncely/testkit';
import mysql from 'mysql2/promise';

/** The real server the tests use (root without a password on 127.0.0.1 in CI and the dev container). */
export const mysqlUrl = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/** A small pool for test-side SQL (creating, counting, dropping, killing sessions). */
export const admin = mysql.createPool({ uri: mysqlUrl, connectionLimit: 3, supportBigNumbers: true });

/**
 * True when MariaDB answers. With CI=true a missing server fails the run (requireService
 * throws); elsewhere the real-server tests are skipped with a warning.
 */
export const hasMySql = await requireService('MariaDB', () => admin.query('DO 0'));

/** A database name no other run or test uses (every test creates its own and drops only that). */
export function uniqueSchema(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
}

/** Drops a database this test run created. */
export async function dropSchema(schema: string): Promise<void> {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(schema)) throw new Error(`not a test database name: ${schema}`);
  await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``);
}

/**
 * MySQL's dialect for the testkit's conformance suites. DDL goes through the admin pool:
 * MySQL commits DDL implicitly, and the store refuses a transaction that ended inside its
 * work. SIGNAL outside a stored program is MariaDB's (MySQL 8 would need a procedure).
 */
export const MYSQL_DIALECT: SqlDialect = {
  name: 'MySQL',
  param: () => '?',
  quote: (name) => `\`${name.replaceAll('`', '``')}\``,
  types: {
    key: 'VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin',
    text: 'TEXT',
    serialPrimaryKey: 'BIGINT AUTO_INCREMENT PRIMARY KEY',
    insertedAt: 'DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)',
  },
  count: 'COUNT(*)',
  createNamespace: (quoted) => `CREATE DATABASE ${quoted}`,
  dropNamespace: (quoted) => `DROP DATABASE IF EXISTS ${quoted}`,
  sleep: (seconds) => `DO SLEEP(${seconds})`,
  raise: (kind) =>
    ({
      serialization: `SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'conformance probe'`,
      deadlock: `SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'conformance probe'`,
      lockTimeout: `SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1205, MESSAGE_TEXT = 'conformance probe'`,
    })[kind],
  failingStatement: 'SELECT * FROM oncely_conformance_no_such_table',
  // Whole seconds only in MySQL; session-wide on that pooled connection.
  shortLockTimeout: 'SET SESSION innodb_lock_wait_timeout = 1',
  isUniqueViolation: (error) => (error as { errno?: unknown } | null)?.errno === 1062,
  lockWaiters: `SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX
      WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id <> CONNECTION_ID()`,
  ddl: async (sql) => {
    await admin.query(sql);
  },
};
