import { randomUUID } from 'node:crypto';
import type {
  FingerprintStore,
  IdempotencyStore,
  LeaseClaim,
  Logger,
  MessageKey,
  OffsetStore,
  SqlClient,
  StoreErrorKind,
} from '@oncely/core';
import { ConfigError, stderrLogger, toLogger } from '@oncely/core';
import type { MySqlApplyIfNewerOptions } from './applyIfNewer.js';
import { applyIfNewer } from './applyIfNewer.js';
import { classifyMySqlStoreError, ER_DUP_ENTRY, markFromStoreConnection } from './classifyError.js';
import type { MySqlCallerTransaction } from './drivers/CallerTransactionDriver.js';
import { CallerTransactionDriver } from './drivers/CallerTransactionDriver.js';
import type { MySqlDriver, RawConnection } from './drivers/MySqlDriver.js';
import type { MySqlPoolLike } from './drivers/PoolDriver.js';
import { PoolDriver } from './drivers/PoolDriver.js';
import { KeyTooLongError, MySqlSchemaVersionError } from './errors.js';
import { buildFingerprintQueries, createMySqlFingerprintStore, text } from './fingerprints.js';
import { quoteSchemaName } from './identifiers.js';
import { MIGRATIONS, MYSQL_LATEST_VERSION } from './migrations/index.js';
import type { MySqlQueries } from './queries.js';
import { buildQueries } from './queries.js';
import { StoreConnection } from './StoreConnection.js';

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

/** acquireLease re-reads at most this often when the row it ran into vanished meanwhile. */
const ACQUIRE_ATTEMPTS = 3;

/** How long `migrate()` waits for another migrator's named lock, in seconds. */
const MIGRATION_LOCK_WAIT_SECONDS = 120;

/** Byte limits of the VARBINARY key columns (migration 0001). */
const MAX_MESSAGE_ID_BYTES = 2048;
const MAX_CONSUMER_BYTES = 800;

const DUPLICATE = new Set([ER_DUP_ENTRY]);

/**
 * The MySQL / MariaDB store: processed markers written in the handler's transaction,
 * leased claims, advisory attempt counters with run tokens, Kafka offsets and payload
 * fingerprints, on `mysql2`. For MySQL 8.0+ and MariaDB 10.6+ (tested on MariaDB 10.11).
 * Handlers' `ctx.tx.query` takes `?` placeholders (mysql2's), not `$1`. No transactional
 * outbox: `ctx.publish` throws `OutboxUnsupportedError` (see the README).
 *
 * @example
 * ```ts
 * const store = new MySqlStore({ url: process.env.DATABASE_URL! });
 * await store.migrate();
 * const outcome = await processOnce(store, { consumer: 'payments', messageId: 'm-1' }, async (tx) => {
 *   await tx.query('INSERT INTO payments(order_id, amount) VALUES (?, ?)', ['o-1', 40]);
 * });
 * await store.close();
 * ```
 */
export class MySqlStore implements IdempotencyStore<SqlClient> {
  /** The database holding the store's tables (unquoted). */
  readonly schema: string;
  /** Kafka offsets kept in the same transaction as the output (`offsets` mode). */
  readonly offsets: OffsetStore<SqlClient>;
  /** Payload fingerprints on the markers (`payloadFingerprint` consumers). */
  readonly fingerprints: FingerprintStore<SqlClient>;
  /** `'mysql'`: which SQL `ctx.tx` speaks (`?` placeholders), for tools that serve several stores. */
  readonly dialect = 'mysql' as const;
  private readonly queries: MySqlQueries;
  private readonly driver: MySqlDriver;
  private schemaVerified = false;
  private savepoints = 0;

  constructor(options: MySqlStoreOptions) {
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('store', 'options are required');
    const fromEnv = options.schema === undefined ? process.env.ONCELY_SCHEMA || undefined : undefined;
    this.schema = options.schema ?? fromEnv ?? 'oncely';
    const quoted = quoteSchemaName(
      this.schema,
      fromEnv === undefined ? 'schema' : 'schema (from ONCELY_SCHEMA)',
    );
    this.queries = buildQueries(quoted);
    this.driver = createDriver(options);
    const q = this.queries;
    this.offsets = {
      advance: async (tx, consumer, topic, partition, offset) => {
        const update = [offset, consumer, topic, partition, offset];
        if ((await tx.query(q.advanceOffset, update)).rowCount === 1) return true;
        try {
          await expecting(tx, q.insertOffset, [consumer, topic, partition, offset]);
          return true;
        } catch (error) {
          if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
        }
        // The partition's first row was inserted by another transaction meanwhile (we
        // waited for its commit): its offset decides.
        return (await tx.query(q.advanceOffset, update)).rowCount === 1;
      },
      read: (consumer, topic) =>
        this.run('offsets.read()', async (connection) => {
          const { rows } = await connection.query<{ partition_no: number; next_offset: string }>(
            q.readOffsets,
            [consumer, topic],
          );
          return new Map(rows.map((row) => [Number(row.partition_no), String(row.next_offset)]));
        }),
    };
    this.fingerprints = createMySqlFingerprintStore(buildFingerprintQueries(quoted), {
      run: (operation, work) => this.run(operation, work),
      claim: (tx, consumer, ids, sql, rowParams) => this.claimRows(tx, consumer, ids, sql, rowParams),
      completedBy: (connection, key, owner) => this.completedBy(connection, key, owner),
      toJson,
    });
  }

  /**
   * Applies pending migrations on one connection under the named lock
   * `GET_LOCK('oncely_migrate:<schema>')`: concurrent callers wait for each other and the
   * later ones find nothing to do. MySQL commits each DDL statement on its own, so the
   * statements are written to run again (`IF NOT EXISTS`) and a version row is written
   * after its migration's last statement. Refuses a database migrated by a newer version
   * of this package ({@link MySqlSchemaVersionError}).
   *
   * @example
   * ```ts
   * const { applied } = await store.migrate();
   * ```
   */
  async migrate(): Promise<MySqlMigrateResult> {
    const q = this.queries;
    const lock = `oncely_migrate:${this.schema}`;
    const applied = await this.driver.session(async (raw) => {
      const { rows } = await raw.query<{ locked: number | null }>(q.getLock, [
        lock,
        MIGRATION_LOCK_WAIT_SECONDS,
      ]);
      if (Number(rows[0]?.locked) !== 1) {
        throw new Error(
          `migrate(): another migrate() of \`${this.schema}\` held the lock ${lock} for ${MIGRATION_LOCK_WAIT_SECONDS} s`,
        );
      }
      try {
        // Checked first so a user without CREATE on the server can migrate a database an
        // administrator created for it.
        if ((await raw.query(q.schemaExists, [this.schema])).rows.length === 0)
          await raw.query(q.createSchema);
        await raw.query(q.createMigrationsTable);
        const versions = await readVersions(raw, q);
        const newest = Math.max(0, ...versions);
        if (newest > MYSQL_LATEST_VERSION)
          throw new MySqlSchemaVersionError(this.schema, newest, MYSQL_LATEST_VERSION);
        const pending = MIGRATIONS.filter((migration) => !versions.has(migration.version));
        for (const migration of pending) {
          for (const statement of migration.statements) {
            await raw.query(statement.replaceAll('{{schema}}', quoteSchemaName(this.schema)));
          }
          await raw.query(q.insertMigration, [migration.version, migration.name]);
        }
        return pending.map((migration) => migration.name);
      } finally {
        await raw.query(q.releaseLock, [lock]).catch(() => {});
      }
    });
    this.schemaVerified = true;
    return { applied, version: MYSQL_LATEST_VERSION };
  }

  /**
   * Runs `work` in one transaction: commits when it resolves, rolls back when it throws.
   * On a pool: READ COMMITTED, bounded lock waits, and a connection that broke is
   * destroyed rather than pooled. `tx.query` takes `?` placeholders.
   *
   * @example
   * ```ts
   * const claimed = await store.transaction(async (tx) => {
   *   const ids = await store.claim(tx, 'payments', ['m-1', 'm-2']);
   *   for (const id of ids) await tx.query('INSERT INTO effects(id) VALUES (?)', [id]);
   *   return ids;
   * });
   * ```
   */
  transaction<T>(work: (tx: SqlClient) => Promise<T>): Promise<T> {
    return this.run('transaction()', work);
  }

  /**
   * Inserts completed markers for `messageIds` in `tx` and returns the IDs this call
   * inserted. IDs are de-duplicated and sorted first, so batches sharing IDs lock them in
   * the same order. An ID another open transaction holds makes the call wait for it: its
   * commit makes the ID a duplicate, its rollback hands it to us. One ID is one `INSERT`
   * (a duplicate answers ER_DUP_ENTRY, which is the answer, not a failure: MySQL undoes
   * only that statement); several are a locking read of those that exist and one `INSERT`
   * of the rest, again while a competing transaction commits one of them meanwhile.
   *
   * @example
   * ```ts
   * await store.transaction(async (tx) => {
   *   const fresh = await store.claim(tx, 'payments', ['m-1']);
   *   if (fresh.has('m-1')) await tx.query('INSERT INTO payments(order_id) VALUES (?)', ['o-1']);
   * });
   * ```
   */
  claim(tx: SqlClient, consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>> {
    const ids = messageIds.length === 1 ? messageIds : [...new Set(messageIds)].sort();
    const q = this.queries;
    return this.claimRows(tx, consumer, ids, { one: q.claimOne, many: q.claimMany }, (id) => [consumer, id]);
  }

  /**
   * Deletes markers for `messageIds` inside `tx` (a batch item whose work failed gives its
   * claim back). Call it only for IDs this transaction claimed.
   *
   * @example
   * ```ts
   * await store.unclaim(tx, 'payments', ['m-2']);
   * ```
   */
  async unclaim(tx: SqlClient, consumer: string, messageIds: readonly string[]): Promise<void> {
    if (messageIds.length === 0) return;
    await tx.query(this.queries.unclaim, [consumer, [...messageIds]]);
  }

  /**
   * Runs `work` under a savepoint of `tx`; a throw rolls back to the savepoint (keeping
   * the rest of the transaction) and rethrows. A statement that failed inside `work` with
   * its error caught there also rolls the savepoint back, and fails it.
   *
   * @example
   * ```ts
   * await store.savepoint(tx, () => tx.query('INSERT INTO seen(id) VALUES (?)', [id])).catch(() => {});
   * ```
   */
  async savepoint<T>(tx: SqlClient, work: () => Promise<T>): Promise<T> {
    const name = `oncely_sp_${++this.savepoints}`;
    const connection = tx instanceof StoreConnection ? tx : undefined;
    await tx.query(`SAVEPOINT ${name}`);
    connection?.enteredSavepoint();
    let result: T;
    try {
      result = await work();
    } catch (error) {
      if (connection) await connection.rollbackToSavepoint(name);
      else await tx.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => {});
      throw error;
    }
    const swallowed = connection?.savepointFailure();
    if (swallowed !== undefined) {
      await connection!.rollbackToSavepoint(name);
      throw swallowed;
    }
    if (connection) await connection.releaseSavepoint(name);
    else await tx.query(`RELEASE SAVEPOINT ${name}`);
    return result;
  }

  /**
   * Increments the advisory attempt counter of `key` in its own autocommit statement and
   * returns the new count. `run`, a token of this run: sent again for the same run (its
   * answer was lost), the count is not incremented twice. Never a dedup gate.
   *
   * @example
   * ```ts
   * const attempt = await store.recordAttempt({ consumer: 'payments', messageId: 'm-1' }, randomUUID());
   * ```
   */
  async recordAttempt(key: MessageKey, run?: string): Promise<number> {
    const result = await this.attemptStatement(this.queries.recordAttempt, [
      key.consumer,
      key.messageId,
      run ?? null,
    ]);
    const insertId = Number((result as { insertId?: unknown }).insertId ?? 0);
    return insertId > 0 ? insertId : 1;
  }

  /**
   * Takes one count of `key` back (a release is never an attempt). Never below zero. With
   * `run`, only that run's count, if it is the one counted last, and once.
   *
   * @example
   * ```ts
   * await store.forgetAttempt({ consumer: 'payments', messageId: 'm-1' }, run);
   * ```
   */
  async forgetAttempt(key: MessageKey, run?: string): Promise<void> {
    await this.attemptStatement(this.queries.forgetAttempt, [
      key.consumer,
      key.messageId,
      run ?? null,
      run ?? null,
    ]);
  }

  /**
   * Deletes the attempt counter of `key` (its marker committed).
   *
   * @example
   * ```ts
   * await store.clearAttempts({ consumer: 'payments', messageId: 'm-1' });
   * ```
   */
  async clearAttempts(key: MessageKey): Promise<void> {
    await this.attemptStatement(this.queries.clearAttempts, [key.consumer, key.messageId]);
  }

  /**
   * Leased mode: claims `key` as `in_progress` until now + `leaseMs` (database clock) with
   * a fresh owner token: a new row is `acquired`; a live claim is `busy`; an expired one
   * is taken over (`takeover: true`); a completed one returns its stored result.
   *
   * @example
   * ```ts
   * const claim = await store.acquireLease({ consumer: 'reports', messageId: 'm-1' }, 30_000);
   * ```
   */
  acquireLease(key: MessageKey, leaseMs: number): Promise<LeaseClaim> {
    assertLeaseMs(leaseMs);
    checkKey(key.consumer, key.messageId);
    const owner = randomUUID();
    const leaseUs = Math.round(leaseMs * 1000);
    const q = this.queries;
    return this.run('acquireLease()', async (connection) => {
      for (let attempt = 1; ; attempt++) {
        try {
          await connection.queryExpecting(
            q.insertLease,
            [key.consumer, key.messageId, leaseUs, owner],
            DUPLICATE,
          );
          return { status: 'acquired', owner, takeover: false, lockedUntil: new Date(Date.now() + leaseMs) };
        } catch (error) {
          if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
        }
        const { rows } = await connection.query<{
          status: string;
          result: string | null;
          remaining_us: number | string | null;
          expired: number | null;
        }>(q.readLeaseForUpdate, [key.consumer, key.messageId]);
        const current = rows[0];
        if (current?.status === 'completed')
          return { status: 'completed', result: parseJson(current.result) };
        if (current && Number(current.expired) === 1) {
          const taken = await connection.query(q.takeOverLease, [
            leaseUs,
            owner,
            key.consumer,
            key.messageId,
          ]);
          if (taken.rowCount === 1)
            return { status: 'acquired', owner, takeover: true, lockedUntil: new Date(Date.now() + leaseMs) };
        } else if (current) {
          // On this process's clock: the database's time left added to our now.
          return {
            status: 'busy',
            lockedUntil: new Date(Date.now() + Number(current.remaining_us ?? 0) / 1000),
          };
        }
        if (attempt >= ACQUIRE_ATTEMPTS)
          throw new Error(`acquireLease: the row of ${key.messageId} kept changing`);
      }
    });
  }

  /**
   * Leased mode: pushes the deadline to now + `leaseMs` (database clock) if `owner` still
   * holds the claim. False means another consumer took it over.
   *
   * @example
   * ```ts
   * if (!(await store.renewLease(key, claim.owner, 30_000))) abortWork();
   * ```
   */
  renewLease(key: MessageKey, owner: string, leaseMs: number): Promise<boolean> {
    assertLeaseMs(leaseMs);
    return this.run('renewLease()', async (connection) => {
      const { rowCount } = await connection.query(this.queries.renewLease, [
        Math.round(leaseMs * 1000),
        key.consumer,
        key.messageId,
        owner,
      ]);
      return rowCount === 1;
    });
  }

  /**
   * Leased mode: marks the claim completed with `result` (JSON) if `owner` still holds it.
   * Idempotent for the owner: a retried completion returns true and keeps the first result.
   *
   * @example
   * ```ts
   * const done = await store.completeLease(key, claim.owner, { reportId: 'r-9' });
   * ```
   */
  completeLease(key: MessageKey, owner: string, result: unknown): Promise<boolean> {
    const json = toJson(result);
    return this.run('completeLease()', async (connection) => {
      const { rowCount } = await connection.query(this.queries.completeLease, [
        json,
        key.consumer,
        key.messageId,
        owner,
      ]);
      return rowCount === 1 || this.completedBy(connection, key, owner);
    });
  }

  /**
   * Leased mode: gives the claim up if `owner` still holds it, so a retry can run at once.
   *
   * @example
   * ```ts
   * await store.releaseLease(key, claim.owner);
   * ```
   */
  async releaseLease(key: MessageKey, owner: string): Promise<void> {
    await this.run('releaseLease()', (connection) =>
      connection.query(this.queries.releaseLease, [key.consumer, key.messageId, owner]),
    );
  }

  /**
   * Classifies an error by MySQL error number, SQLSTATE or socket code, never by message
   * text (see `classifyMySqlError`). Only the store's own connections can make an error
   * `'unavailable'`.
   *
   * @example
   * ```ts
   * if (store.classifyError(error) === 'unavailable') pauseConsuming();
   * ```
   */
  classifyError(error: unknown): StoreErrorKind {
    return classifyMySqlStoreError(error);
  }

  /**
   * One cheap round trip. Until the schema has been seen at this package's version, it also
   * checks that (so a consumer stays paused while the schema is missing or too new).
   *
   * @example
   * ```ts
   * await store.ping();
   * ```
   */
  async ping(): Promise<void> {
    if (this.schemaVerified) {
      await this.driver.ping();
      return;
    }
    await this.run('ping()', async () => {});
  }

  /**
   * Deletes completed markers older than `olderThan`, `batchSize` rows per short
   * transaction (oldest first over the `processed_at` index, `FOR UPDATE SKIP LOCKED`, so
   * rows a claim holds are skipped, not waited for), and attempt counters not touched
   * since then. Claims in progress are never deleted. Returns the number of markers deleted.
   *
   * @example
   * ```ts
   * const deleted = await store.prune({ olderThan: 14 * 24 * 3600 * 1000 });
   * ```
   */
  async prune(options: MySqlPruneOptions): Promise<number> {
    const { olderThan, batchSize = 1000, consumer } = options;
    if (!Number.isInteger(batchSize) || batchSize < 1) {
      throw new ConfigError('batchSize', `must be a positive integer; got ${batchSize}`);
    }
    let cutoff: string;
    if (olderThan instanceof Date && !Number.isNaN(olderThan.getTime())) {
      cutoff = utcDateTime(olderThan);
    } else if (typeof olderThan === 'number' && Number.isFinite(olderThan) && olderThan >= 0) {
      cutoff = await this.run('prune()', async (connection) => {
        const { rows } = await connection.query<{ cutoff: string }>(this.queries.cutoff, [
          Math.round(olderThan * 1000),
        ]);
        return rows[0]!.cutoff;
      });
    } else {
      throw new ConfigError(
        'olderThan',
        `must be a Date or a non-negative number of ms; got ${String(olderThan)}`,
      );
    }
    const withConsumer = consumer !== undefined;
    const filter = withConsumer ? [cutoff, consumer] : [cutoff];
    if (options.dryRun) {
      return this.run('prune()', async (connection) => {
        const { rows } = await connection.query<{ n: number | string }>(
          this.queries.countPrunableMarkers(withConsumer),
          filter,
        );
        return Number(rows[0]!.n);
      });
    }
    const q = this.queries;
    const markers = await this.deleteInBatches(
      q.prunableMarkers(withConsumer),
      q.deleteMarkers,
      [...filter, batchSize],
      batchSize,
      options.onProgress,
    );
    await this.deleteInBatches(
      q.prunableAttempts(withConsumer),
      q.deleteAttempts,
      [...filter, batchSize],
      batchSize,
    );
    return markers;
  }

  /**
   * Version-guarded write in `tx`: the row only when `version` is greater than the stored
   * one. See {@link applyIfNewer}.
   *
   * @example
   * ```ts
   * await store.applyIfNewer(ctx.tx, { table: 'order_status', key: { order_id: id }, version: seq, values: { status } });
   * ```
   */
  applyIfNewer(tx: SqlClient, options: MySqlApplyIfNewerOptions): Promise<boolean> {
    return applyIfNewer(tx, options);
  }

  /**
   * Closes the pool the store created from `url`. A `pool` or `transaction` you passed in
   * stays yours.
   *
   * @example
   * ```ts
   * await consumer.stop();
   * await store.close();
   * ```
   */
  close(): Promise<void> {
    return this.driver.close();
  }

  /** The claim loop shared by plain and fingerprint claims; `ids` sorted and unique. */
  private async claimRows(
    tx: SqlClient,
    consumer: string,
    ids: readonly string[],
    sql: { one: string; many(count: number): string },
    rowParams: (id: string) => unknown[],
  ): Promise<ReadonlySet<string>> {
    if (ids.length === 0) return new Set();
    for (const id of ids) checkKey(consumer, id);
    if (ids.length === 1) {
      try {
        await expecting(tx, sql.one, rowParams(ids[0]!));
        return new Set(ids);
      } catch (error) {
        if ((error as { errno?: unknown }).errno === ER_DUP_ENTRY) return new Set();
        throw error;
      }
    }
    // Each round either inserts the rest or finds one more ID committed by a competing
    // transaction (the locking read then sees it): at most ids.length + 1 rounds.
    for (let round = 0; round <= ids.length; round++) {
      const { rows } = await tx.query<{ message_id: Buffer | string }>(this.queries.existing, [
        consumer,
        [...ids],
      ]);
      const existing = new Set(rows.map((row) => text(row.message_id)));
      const fresh = ids.filter((id) => !existing.has(id));
      if (fresh.length === 0) return new Set();
      try {
        await expecting(tx, sql.many(fresh.length), fresh.flatMap(rowParams));
        return new Set(fresh);
      } catch (error) {
        if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
      }
    }
    throw new Error(`claim: the markers of ${ids.length} IDs kept changing`);
  }

  private async completedBy(connection: SqlClient, key: MessageKey, owner: string): Promise<boolean> {
    const { rows } = await connection.query(this.queries.completedBy, [key.consumer, key.messageId, owner]);
    return rows.length === 1;
  }

  private async attemptStatement(sql: string, params: unknown[]) {
    // Once the schema is known good, the counter is one autocommit statement.
    if (this.schemaVerified && this.driver.statement) {
      try {
        return await this.driver.statement(sql, params);
      } catch (error) {
        markFromStoreConnection(error);
        throw error;
      }
    }
    return this.run('attempts', (connection) => connection.query(sql, params));
  }

  private async deleteInBatches(
    select: string,
    remove: (count: number) => string,
    params: unknown[],
    batchSize: number,
    onProgress?: (deleted: number) => void,
  ): Promise<number> {
    let total = 0;
    for (;;) {
      // One short transaction per batch: locks are held briefly and claims interleave.
      const deleted = await this.run('prune()', async (connection) => {
        const { rows } = await connection.query<{ consumer: Buffer; message_id: Buffer }>(select, params);
        if (rows.length > 0) {
          await connection.query(
            remove(rows.length),
            rows.flatMap((row) => [row.consumer, row.message_id]),
          );
        }
        return rows.length;
      });
      total += deleted;
      onProgress?.(total);
      if (deleted < batchSize) return total;
    }
  }

  /** Every store transaction: first use also checks the schema version. */
  private run<T>(operation: string, work: (connection: StoreConnection) => Promise<T>): Promise<T> {
    return this.driver.transaction(operation, async (raw) => {
      const connection = new StoreConnection(raw);
      try {
        if (!this.schemaVerified) await this.verifySchema(connection);
        const result = await work(connection);
        connection.assertCommittable();
        return result;
      } finally {
        connection.end();
      }
    });
  }

  /** Refuses a schema that is missing, behind, or migrated by a newer version of this package. */
  private async verifySchema(connection: SqlClient): Promise<void> {
    const q = this.queries;
    const present =
      (await connection.query(q.tableExists, [this.schema, 'oncely_migrations'])).rows.length > 0;
    const versions = present ? await readVersions(connection, q) : new Set<number>();
    const version = schemaVersion(versions);
    if (version !== MYSQL_LATEST_VERSION)
      throw new MySqlSchemaVersionError(this.schema, version, MYSQL_LATEST_VERSION);
    this.schemaVerified = true;
  }
}

function createDriver(options: MySqlStoreOptions): MySqlDriver {
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
  const settings = { lockWaitTimeoutSeconds: Math.max(1, Math.ceil(lockTimeoutMs / 1000)), queryTimeoutMs };
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

/** Refuses keys the VARBINARY columns cannot hold: never truncated into another key. */
function checkKey(consumer: string, messageId: string): void {
  const consumerBytes = Buffer.byteLength(consumer, 'utf8');
  if (consumerBytes > MAX_CONSUMER_BYTES)
    throw new KeyTooLongError('consumer', consumerBytes, MAX_CONSUMER_BYTES);
  const idBytes = Buffer.byteLength(messageId, 'utf8');
  if (idBytes > MAX_MESSAGE_ID_BYTES) throw new KeyTooLongError('messageId', idBytes, MAX_MESSAGE_ID_BYTES);
}

/** A store statement whose duplicate-key error is the answer, not a failure of the transaction. */
function expecting(tx: SqlClient, sql: string, params: unknown[]) {
  return tx instanceof StoreConnection ? tx.queryExpecting(sql, params, DUPLICATE) : tx.query(sql, params);
}

async function readVersions(connection: RawConnection | SqlClient, q: MySqlQueries): Promise<Set<number>> {
  const { rows } = await connection.query<{ version: number }>(q.readMigrationVersions);
  return new Set(rows.map((row) => Number(row.version)));
}

/** The version a schema is usable at (see @oncely/postgres: numbers may have gaps). */
function schemaVersion(applied: ReadonlySet<number>): number {
  const newest = Math.max(0, ...applied);
  if (newest > MYSQL_LATEST_VERSION) return newest;
  let version = 0;
  for (const migration of MIGRATIONS) {
    if (!applied.has(migration.version)) break;
    version = migration.version;
  }
  return version;
}

function assertLeaseMs(leaseMs: number): void {
  if (typeof leaseMs !== 'number' || !Number.isFinite(leaseMs) || leaseMs <= 0) {
    throw new ConfigError('leaseMs', `must be a positive number of ms; got ${leaseMs}`);
  }
}

/** A Date as a DATETIME(6) literal in UTC (the store's columns hold UTC). */
function utcDateTime(date: Date): string {
  return `${date.toISOString().replace('T', ' ').replace('Z', '')}000`;
}

function toJson(result: unknown): string {
  try {
    return JSON.stringify(result ?? null) ?? 'null';
  } catch {
    return 'null';
  }
}

function parseJson(value: string | null): unknown {
  if (value === null || value === undefined) return null;
  try {
    return JSON.parse(value);
  } catch {
    return null;
  }
}
