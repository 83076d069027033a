import type { Logger } from '@oncely/core';
import { ConfigError, stderrLogger, toLogger } from '@oncely/core';
import type { CallerTransaction } from '../drivers/CallerTransactionDriver.js';
import { CallerTransactionDriver } from '../drivers/CallerTransactionDriver.js';
import type { PgPoolLike, PgTimeouts } from '../drivers/PgDriver.js';
import { PgDriver } from '../drivers/PgDriver.js';
import type { PgliteLike } from '../drivers/PgliteDriver.js';
import { PgliteDriver } from '../drivers/PgliteDriver.js';
import type { StoreDriver } from '../drivers/StoreDriver.js';

/**
 * Options every kind of {@link PostgresStore} takes.
 *
 * @example
 * ```ts
 * new PostgresStore({ connectionString, schema: 'billing_oncely', lockTimeoutMs: 2000 });
 * ```
 */
export interface PostgresStoreCommonOptions {
  /**
   * Schema holding the store's tables. A plain identifier (letters, digits, `_`); always
   * quoted in SQL.
   * @default the `ONCELY_SCHEMA` environment variable (as the CLI's `--schema`), else 'oncely'
   */
  schema?: string;
  /**
   * `SET LOCAL lock_timeout` for every store transaction, in ms. A claim waiting longer
   * than this on another transaction's marker fails with 55P03, which the core retries
   * without counting an attempt. 0 disables the timeout.
   * @default 5000
   */
  lockTimeoutMs?: number;
  /**
   * `pg` only: the longest wait for one statement's answer, in ms (0: none). Past it the
   * connection is discarded and the store reports itself unavailable, so a silent network
   * partition becomes an outage (the consumer pauses, holds, then releases) instead of a
   * hang. Keep it above your handlers' slowest `ctx.tx` statement.
   * @default 30000 (the consumer's default `handlerTimeoutMs`)
   */
  queryTimeoutMs?: number;
  /**
   * `pg` only: `SET LOCAL idle_in_transaction_session_timeout` for store transactions, in
   * ms (0: the server's setting). A client that vanishes mid-transaction has its session
   * ended by the server after this long, freeing the marker rows it locked. Keep it above
   * `handlerTimeoutMs`: a handler awaiting an HTTP call leaves its transaction idle.
   * @default 60000
   */
  idleInTransactionTimeoutMs?: number;
  /**
   * Receives warnings such as idle pooled connections failing during a database outage.
   * @default core's stderr logger
   */
  logger?: Logger;
}

/**
 * A pool the store creates from a connection string, and closes in `close()`.
 *
 * @example
 * ```ts
 * new PostgresStore({ connectionString: process.env.DATABASE_URL, poolMax: 20 });
 * ```
 */
export interface PostgresConnectionStringOptions extends PostgresStoreCommonOptions {
  /** `postgres://user:password@host:5432/database` */
  connectionString: string;
  /** Most connections the store's pool opens. @default 10 */
  poolMax?: number;
  /** How long a new connection may take before the attempt counts as an outage. @default 10000 */
  connectTimeoutMs?: number;
}

/**
 * Your own `pg.Pool`. The store never closes it.
 *
 * @example
 * ```ts
 * new PostgresStore({ pool: new pg.Pool({ connectionString }) });
 * ```
 */
export interface PostgresPoolOptions extends PostgresStoreCommonOptions {
  pool: PgPoolLike;
}

/**
 * Your own transactions (Knex, Drizzle, Prisma, pg): every store operation runs inside
 * `transaction`, and commit and rollback are yours.
 *
 * @example
 * ```ts
 * new PostgresStore({ transaction: (work) => runInMyTransaction(work) });
 * ```
 */
export interface PostgresCallerTransactionOptions extends PostgresStoreCommonOptions {
  transaction: CallerTransaction;
}

/**
 * Your own PGlite instance. The store never closes it. One transaction at a time.
 *
 * @example
 * ```ts
 * new PostgresStore({ pglite: await PGlite.create('./data') });
 * ```
 */
export interface PostgresPgliteOptions extends PostgresStoreCommonOptions {
  pglite: PgliteLike;
}

/**
 * An embedded PGlite the store starts and closes (what {@link PostgresStore.embedded} builds).
 *
 * @example
 * ```ts
 * new PostgresStore({ embedded: { dataDir: './oncely-data' } });
 * ```
 */
export interface PostgresEmbeddedOptions extends PostgresStoreCommonOptions {
  embedded: {
    /** Directory PGlite keeps its data in. @default in memory (lost on close) */
    dataDir?: string;
  };
}

/**
 * How to reach PostgreSQL: exactly one of `connectionString`, `pool`, `transaction`,
 * `pglite`, `embedded`.
 *
 * @example
 * ```ts
 * const options: PostgresStoreOptions = process.env.DATABASE_URL
 *   ? { connectionString: process.env.DATABASE_URL }
 *   : { embedded: {} };
 * const store = new PostgresStore(options);
 * ```
 */
export type PostgresStoreOptions =
  | PostgresConnectionStringOptions
  | PostgresPoolOptions
  | PostgresCallerTransactionOptions
  | PostgresPgliteOptions
  | PostgresEmbeddedOptions;

/**
 * Options of {@link PostgresStore.embedded}.
 *
 * @example
 * ```ts
 * PostgresStore.embedded({ dataDir: './oncely-data', schema: 'oncely' });
 * ```
 */
export interface EmbeddedStoreOptions {
  /** Directory PGlite keeps its data in. @default in memory (lost on close) */
  dataDir?: string;
  /** @default the `ONCELY_SCHEMA` environment variable, else 'oncely' */
  schema?: string;
  /** @default 5000 */
  lockTimeoutMs?: number;
}

/** The driver the options name (exactly one kind), with its options checked. */
export function createDriver(options: PostgresStoreOptions, mergeable: ReadonlySet<string>): StoreDriver {
  const kinds = (['connectionString', 'pool', 'transaction', 'pglite', 'embedded'] as const).filter(
    (kind) => (options as unknown as Record<string, unknown>)[kind] !== undefined,
  );
  if (kinds.length !== 1) {
    throw new ConfigError(
      'store',
      `needs exactly one of connectionString, pool, transaction, pglite or embedded; got ${kinds.length ? kinds.join(', ') : 'none'}`,
    );
  }
  const log = toLogger(options.logger ?? stderrLogger);
  if ('connectionString' in options) {
    if (typeof options.connectionString !== 'string' || options.connectionString === '') {
      throw new ConfigError('connectionString', 'must be a non-empty string');
    }
    const poolMax = options.poolMax ?? 10;
    if (!Number.isInteger(poolMax) || poolMax < 1)
      throw new ConfigError('poolMax', `must be a positive integer; got ${poolMax}`);
    return new PgDriver(
      {
        connectionString: options.connectionString,
        poolMax,
        connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      },
      log,
      pgTimeouts(options),
      mergeable,
    );
  }
  if ('pool' in options) return new PgDriver({ pool: options.pool }, log, pgTimeouts(options), mergeable);
  if ('transaction' in options) {
    if (typeof options.transaction !== 'function') throw new ConfigError('transaction', 'must be a function');
    return new CallerTransactionDriver(options.transaction);
  }
  if ('pglite' in options) return new PgliteDriver({ pglite: options.pglite });
  return new PgliteDriver({ dataDir: options.embedded.dataDir });
}

function pgTimeouts(options: PostgresStoreCommonOptions): PgTimeouts {
  const timeouts = {
    queryTimeoutMs: options.queryTimeoutMs ?? 30_000,
    idleInTransactionTimeoutMs: options.idleInTransactionTimeoutMs ?? 60_000,
  };
  for (const [field, value] of Object.entries(timeouts)) {
    if (!Number.isInteger(value) || value < 0) {
      throw new ConfigError(field, `must be a non-negative integer of ms; got ${String(value)}`);
    }
  }
  return timeouts;
}
