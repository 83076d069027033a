import { randomUUID } from 'node:crypto';
import { mysqlDialect, requireService, type SqlDialect } from '@oncely/testkit';
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

/** MySQL's dialect for the testkit's suites; DDL goes through the admin pool. */
export const MYSQL_DIALECT: SqlDialect = mysqlDialect(async (sql) => {
  await admin.query(sql);
});
