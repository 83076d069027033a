/**
 * The SQL a conformance suite writes itself (its business tables, its probes), in the
 * dialect of the store under test. The suites never assume PostgreSQL: a store for
 * another database passes its own dialect (`@oncely/mysql`'s tests pass MySQL's), and
 * every scenario runs unchanged on it.
 *
 * @example
 * ```ts
 * const insert = `INSERT INTO ${dialect.quote('effects')} (message_id) VALUES (${dialect.param(1)})`;
 * ```
 */
export interface SqlDialect {
  /** For titles and messages. */
  readonly name: string;
  /** The placeholder of the n-th parameter (1-based): `$1` or `?`. */
  param(n: number): string;
  /** A plain identifier, quoted: `"name"` or `` `name` ``. */
  quote(name: string): string;
  /** Column types of the suites' tables. */
  readonly types: {
    /** A string column that may be (part of) a primary key. */
    key: string;
    /** A nullable string column. */
    text: string;
    /** An auto-incrementing primary key column, in insertion order. */
    serialPrimaryKey: string;
    /** A column with the time of the insert. */
    insertedAt: string;
  };
  /** `SELECT ... AS n`: the count of rows, as a number or a numeric string. */
  readonly count: string;
  /** Creates a schema (PostgreSQL) or database (MySQL); `quoted` is from {@link quote}. */
  createNamespace(quoted: string): string;
  dropNamespace(quoted: string): string;
  /** A statement that holds its transaction open for `seconds`. */
  sleep(seconds: number): string;
  /** A statement that fails with a serialization failure, a deadlock or a lock timeout. */
  raise(kind: 'serialization' | 'deadlock' | 'lockTimeout'): string;
  /** A statement that fails (the "swallowed statement error" of adapter scenario 4). */
  readonly failingStatement: string;
  /** Statement setting a lock wait of about 100 ms for the rest of the transaction. */
  readonly shortLockTimeout: string;
  /** Whether `error` is a unique-key violation. */
  isUniqueViolation(error: unknown): boolean;
  /**
   * `SELECT ... AS n`: how many other sessions of this database wait on a lock. Scenario 9's
   * fallback where the dialect cannot name the holder ({@link lockWaitersOn}): it counts
   * other tests' lock waits too, so on a shared server the race may pass unforced.
   */
  readonly lockWaiters: string;
  /** `SELECT ... AS id`: the server's ID of this session (run inside a transaction to name its holder). */
  readonly backendId?: string;
  /**
   * `SELECT ... AS n`: how many sessions wait on a lock that session `holder` holds. Only
   * that session's waiters: a count of every lock wait on the server counted other test
   * files' waits too (three files run at once) and let a forced race pass unforced. When
   * the query fails (a server without the view it reads), scenario 9 uses {@link lockWaiters}.
   */
  lockWaitersOn?(holder: number): string;
  /**
   * Runs DDL outside the store's transactions, where the database commits DDL on its own
   * (MySQL): the store refuses a transaction that ended inside its work. Without it DDL
   * runs in a store transaction (PostgreSQL: DDL is transactional).
   */
  ddl?(sql: string): Promise<void>;
}

/**
 * PostgreSQL (and PGlite): the default of every suite.
 *
 * @example
 * ```ts
 * POSTGRES_DIALECT.param(2); // '$2'
 * ```
 */
export const POSTGRES_DIALECT: SqlDialect = {
  name: 'PostgreSQL',
  param: (n) => `$${n}`,
  quote: (name) => `"${name.replaceAll('"', '""')}"`,
  types: {
    key: 'text',
    text: 'text',
    serialPrimaryKey: 'bigserial PRIMARY KEY',
    insertedAt: 'timestamptz NOT NULL DEFAULT clock_timestamp()',
  },
  count: 'count(*)::int',
  createNamespace: (quoted) => `CREATE SCHEMA ${quoted}`,
  dropNamespace: (quoted) => `DROP SCHEMA IF EXISTS ${quoted} CASCADE`,
  sleep: (seconds) => `SELECT pg_sleep(${seconds})`,
  raise: (kind) => {
    const sqlstate = { serialization: '40001', deadlock: '40P01', lockTimeout: '55P03' }[kind];
    return `DO $$ BEGIN RAISE EXCEPTION 'conformance probe' USING ERRCODE = '${sqlstate}'; END $$`;
  },
  failingStatement: 'SELECT 1 / 0',
  shortLockTimeout: `SET LOCAL lock_timeout = '100ms'`,
  isUniqueViolation: (error) => (error as { code?: unknown } | null)?.code === '23505',
  lockWaiters: `SELECT count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
  backendId: 'SELECT pg_backend_pid() AS id',
  lockWaitersOn: (holder) =>
    `SELECT count(*) AS n FROM pg_stat_activity WHERE ${Math.trunc(holder)} = ANY(pg_blocking_pids(pid))`,
};

/**
 * MySQL and MariaDB (`@oncely/mysql`'s `ctx.tx`: `?` placeholders). `ddl` runs DDL on a
 * connection of the test's own (MySQL commits DDL implicitly, and the store refuses a
 * transaction that ended inside its work). The transient-error probes use SIGNAL outside a
 * stored program, which MariaDB accepts (MySQL 8 would need a procedure).
 *
 * @example
 * ```ts
 * const admin = mysql.createPool({ uri: url, connectionLimit: 2 });
 * const sql = mysqlDialect(async (statement) => { await admin.query(statement); });
 * ```
 */
export function mysqlDialect(ddl: (sql: string) => Promise<void>): SqlDialect {
  return {
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
    // Whole seconds only in MySQL, and session-wide on that pooled connection.
    shortLockTimeout: 'SET SESSION innodb_lock_wait_timeout = 1',
    isUniqueViolation: (error) => (error as { errno?: unknown } | null)?.errno === 1062,
    lockWaiters: `SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX
      WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id <> CONNECTION_ID()`,
    backendId: 'SELECT CONNECTION_ID() AS id',
    // MariaDB's view (MySQL 8 moved it to performance_schema.data_lock_waits: the query
    // fails there and scenario 9 falls back to lockWaiters).
    lockWaitersOn: (holder) => `SELECT COUNT(*) AS n FROM information_schema.INNODB_LOCK_WAITS w
      JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
      WHERE b.trx_mysql_thread_id = ${Math.trunc(holder)}`,
    ddl,
  };
}
