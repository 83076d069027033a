import type { Logger } from '@oncely/core';
import { ConfigError, stderrLogger, toLogger } from '@oncely/core';
import type { MySqlCallerTransaction } from './drivers/CallerTransactionDriver.js';
import { CallerTransactionDriver } from './drivers/CallerTransactionDriver.js';
import type { MySqlDriver } from './drivers/MySqlDriver.js';
import type { MySqlPoolLike } from './drivers/PoolDriver.js';
import { PoolDriver } from './drivers/PoolDriver.js';

/**
 * Options every kind of {@link MySqlStore} takes.
 *
 * @example
 * ```ts
 * new MySqlStore({ url, schema: 'billing_oncely', lockTimeoutMs: 2000 });
 * ```
 */
export interface MySqlStoreCommonOptions {
  /**
   * Database (MySQL's schema) holding the store's tables; `migrate()` creates it when it
   * is missing and the user may. A plain identifier, always quoted. Give your application's
   * own database to keep everything in one (the tables are `processed_messages`,
   * `attempts`, `offsets`, `oncely_migrations`).
   * @default the `ONCELY_SCHEMA` environment variable (as the CLI's `--schema`), else 'oncely'
   */
  schema?: string;
  /**
   * `innodb_lock_wait_timeout` of the store's sessions, in ms, rounded up to whole seconds
   * (MySQL's unit, at least 1 s). A claim waiting longer than this on another
   * transaction's marker fails with errno 1205, which the core retries without counting an
   * attempt. Pool modes only.
   * @default 5000
   */
  lockTimeoutMs?: number;
  /**
   * Pool modes: the longest wait for one statement's answer, in ms (0: none). Past it the
   * connection is destroyed and the store reports itself unavailable, so a silent network
   * partition becomes an outage (the consumer pauses, holds, then releases) instead of a
   * hang. Keep it above your handlers' slowest `ctx.tx` statement.
   * @default 30000 (the consumer's default `handlerTimeoutMs`)
   */
  queryTimeoutMs?: number;
  /**
   * Pool modes: the longest wait for a pooled connection, in ms. mysql2's pool queues a
   * request for a connection without limit when all are in use (a pool exhausted by long
   * transactions, or by statements a silent server never answers); past this bound the
   * store reports itself unavailable (`StoreUnavailableError`) instead of waiting forever,
   * and a connection that arrives later goes straight back to the pool.
   * @default 10000
   */
  poolWaitTimeoutMs?: number;
  /** Receives warnings such as idle pooled connections failing. @default core's stderr logger */
  logger?: Logger;
}

/**
 * A pool the store creates from a URL (mysql2), and closes in `close()`.
 *
 * @example
 * ```ts
 * new MySqlStore({ url: 'mysql://app:secret@db:3306/app', poolMax: 20 });
 * ```
 */
export interface MySqlUrlOptions extends MySqlStoreCommonOptions {
  /** `mysql://user:password@host:3306/database` (`mariadb://` is taken as well). */
  url: string;
  /** Most connections the store's pool opens. @default 10 */
  poolMax?: number;
  /** How long a new connection may take before the attempt counts as an outage. @default 10000 */
  connectTimeoutMs?: number;
  /** Idle connections are closed after this long. @default 30000 */
  idleTimeoutMs?: number;
}

/**
 * Your own `mysql2/promise` pool (or a callback pool: its `.promise()` is used). The store
 * never closes it. The store sets READ COMMITTED and `innodb_lock_wait_timeout` on the
 * session of each connection it uses, once.
 *
 * @example
 * ```ts
 * new MySqlStore({ pool: mysql.createPool({ uri: process.env.DATABASE_URL }) });
 * ```
 */
export interface MySqlPoolOptions extends MySqlStoreCommonOptions {
  pool: MySqlPoolLike | { promise(): MySqlPoolLike };
}

/**
 * Your own transactions (Knex, Drizzle, Prisma, TypeORM): every store operation runs inside
 * `transaction`, and commit and rollback are yours.
 *
 * @example
 * ```ts
 * new MySqlStore({ transaction: (work) => runInMyTransaction(work) });
 * ```
 */
export interface MySqlCallerTransactionOptions extends MySqlStoreCommonOptions {
  transaction: MySqlCallerTransaction;
}

/**
 * How to reach MySQL or MariaDB: exactly one of `url`, `pool`, `transaction`.
 *
 * @example
 * ```ts
 * const options: MySqlStoreOptions = { url: process.env.DATABASE_URL! };
 * const store = new MySqlStore(options);
 * ```
 */
export type MySqlStoreOptions = MySqlUrlOptions | MySqlPoolOptions | MySqlCallerTransactionOptions;

/**
 * What {@link MySqlStore.prune} deletes.
 *
 * @example
 * ```ts
 * await store.prune({ olderThan: 14 * 24 * 3600 * 1000, batchSize: 5000, consumer: 'payments' });
 * ```
 */
export interface MySqlPruneOptions {
  /**
   * Completed markers processed before this are deleted: a `Date`, or an age in ms on the
   * database clock. Keep it longer than the broker's redelivery horizon.
   */
  olderThan: Date | number;
  /** Rows deleted per transaction. @default 1000 */
  batchSize?: number;
  /** Only this consumer's markers. @default every consumer */
  consumer?: string;
  /** Count the markers that would go, delete nothing. @default false */
  dryRun?: boolean;
  /** Called after each batch with the running total deleted. */
  onProgress?: (deleted: number) => void;
}

/**
 * What {@link MySqlStore.migrate} did.
 *
 * @example
 * ```ts
 * const { applied, version } = await store.migrate();
 * ```
 */
export interface MySqlMigrateResult {
  /** Names of the migrations this call applied (empty when up to date). */
  applied: string[];
  /** The schema version now. */
  version: number;
}

export function createDriver(options: MySqlStoreOptions): MySqlDriver {
  const kinds = (['url', 'pool', 'transaction'] as const).filter(
    (kind) => (options as unknown as Record<string, unknown>)[kind] !== undefined,
  );
  if (kinds.length !== 1) {
    throw new ConfigError(
      'store',
      `needs exactly one of url, pool or transaction; got ${kinds.length ? kinds.join(', ') : 'none'}`,
    );
  }
  const log = toLogger(options.logger ?? stderrLogger);
  const lockTimeoutMs = options.lockTimeoutMs ?? 5000;
  const queryTimeoutMs = options.queryTimeoutMs ?? 30_000;
  for (const [field, value] of Object.entries({ lockTimeoutMs, queryTimeoutMs })) {
    if (!Number.isInteger(value) || value < 0)
      throw new ConfigError(field, `must be a non-negative integer of ms; got ${String(value)}`);
  }
  const poolWaitTimeoutMs = options.poolWaitTimeoutMs ?? 10_000;
  if (!Number.isInteger(poolWaitTimeoutMs) || poolWaitTimeoutMs < 1)
    throw new ConfigError(
      'poolWaitTimeoutMs',
      `must be a positive integer of ms; got ${String(poolWaitTimeoutMs)}`,
    );
  const settings = {
    lockWaitTimeoutSeconds: Math.max(1, Math.ceil(lockTimeoutMs / 1000)),
    queryTimeoutMs,
    poolWaitTimeoutMs,
  };
  if ('url' in options) {
    const url = checkUrl(options.url);
    const poolMax = options.poolMax ?? 10;
    if (!Number.isInteger(poolMax) || poolMax < 1)
      throw new ConfigError('poolMax', `must be a positive integer; got ${poolMax}`);
    return new PoolDriver(
      {
        url,
        poolMax,
        connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
        idleTimeoutMs: options.idleTimeoutMs ?? 30_000,
      },
      settings,
      log,
    );
  }
  if ('pool' in options) {
    const given = options.pool as Partial<MySqlPoolLike> & { promise?: () => MySqlPoolLike };
    // A callback pool (mysql2's createPool) has .promise(); a promise pool has getConnection().
    const pool =
      typeof given?.getConnection === 'function' && given.getConnection.length === 0
        ? (given as MySqlPoolLike)
        : typeof given?.promise === 'function'
          ? given.promise()
          : undefined;
    if (!pool)
      throw new ConfigError('pool', 'must be a mysql2 pool (from mysql2/promise, or one with .promise())');
    return new PoolDriver({ pool }, settings, log);
  }
  if (typeof options.transaction !== 'function') throw new ConfigError('transaction', 'must be a function');
  return new CallerTransactionDriver(options.transaction);
}

/** Checks a store URL, so a typo is a clear ConfigError instead of a connection attempt to nowhere. */
function checkUrl(url: unknown): string {
  if (typeof url !== 'string' || url === '') throw new ConfigError('url', 'must be a non-empty string');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError('url', 'must be a URL such as mysql://user:password@host:3306/database');
  }
  if (parsed.protocol !== 'mysql:' && parsed.protocol !== 'mariadb:') {
    throw new ConfigError('url', `must start with mysql:// or mariadb://; got ${parsed.protocol}//`);
  }
  if (!parsed.hostname) throw new ConfigError('url', 'must name a host (mysql://user@host:3306/database)');
  // mysql2 reads mysql:// only; mariadb:// names the same protocol.
  if (parsed.protocol === 'mariadb:') return `mysql:${url.slice('mariadb:'.length)}`;
  return url;
}
