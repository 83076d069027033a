import type {
  DeadLetterLog,
  FingerprintStore,
  HttpKeyStore,
  IdempotencyStore,
  LeaseClaim,
  MessageKey,
  OffsetStore,
  SqlClient,
  StoreErrorKind,
} from '@oncely/core';
import { ConfigError } from '@oncely/core';
import type { MySqlApplyIfNewerOptions } from './applyIfNewer.js';
import { applyIfNewer } from './applyIfNewer.js';
import { claimRows } from './claims.js';
import { classifyMySqlStoreError, markFromStoreConnection } from './classifyError.js';
import { createMySqlDeadLetterLog, passLockName } from './deadLetterLog.js';
import { CallerTransactionDriver } from './drivers/CallerTransactionDriver.js';
import type { MySqlDriver } from './drivers/MySqlDriver.js';
import { buildFingerprintQueries, createMySqlFingerprintStore } from './fingerprints.js';
import { createMySqlHttpKeys } from './httpKeys.js';
import { quoteSchemaName } from './identifiers.js';
import { acquireLease as acquireLeaseIn, assertLeaseMs, toJson } from './leases.js';
import { verifySchema as checkSchemaVersion, migrate as migrateSchema } from './migrate.js';
import { createOffsetStore } from './offsets.js';
import type { MySqlMigrateResult, MySqlPruneOptions, MySqlStoreOptions } from './options.js';
import { createDriver } from './options.js';
import type { MySqlQueries } from './queries.js';
import { buildQueries } from './queries.js';
import { prune as pruneMarkers } from './retention.js';
import { StoreConnection } from './StoreConnection.js';

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
  /** Marker look-ups and the discard log of `oncely dlq` (`DeadLetters`). */
  readonly deadLetterLog: DeadLetterLog;
  readonly dialect = 'mysql' as const;
  private readonly queries: MySqlQueries;
  private readonly quotedSchema: string;
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
    this.quotedSchema = quoted;
    this.queries = buildQueries(quoted);
    this.driver = createDriver(options);
    const q = this.queries;
    this.offsets = createOffsetStore(q, (operation, work) => this.run(operation, work));
    this.deadLetterLog = createMySqlDeadLetterLog(
      quoted,
      (operation, work) => this.run(operation, work),
      this.driver.sessionLock
        ? (consumer, queue) => this.driver.sessionLock!(passLockName(this.schema, consumer, queue))
        : undefined,
    );
    this.fingerprints = createMySqlFingerprintStore(buildFingerprintQueries(quoted), {
      run: (operation, work) => this.run(operation, work),
      claim: (tx, consumer, ids, sql, rowParams) => claimRows(tx, q.existing, consumer, ids, sql, rowParams),
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
    const result = await migrateSchema(this.driver, this.schema, this.queries);
    this.schemaVerified = true;
    return result;
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
    return claimRows(tx, q.existing, consumer, ids, { one: q.claimOne, many: q.claimMany }, (id) => [
      consumer,
      id,
    ]);
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
    return acquireLeaseIn((operation, work) => this.run(operation, work), this.queries, key, leaseMs);
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
    return pruneMarkers((operation, work) => this.run(operation, work), this.queries, options);
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
   * The statements `@oncely/http` runs on its idempotency keys table
   * (`<schema>.http_idempotency_keys`, migration 0002 of this store). Only in the store's
   * own database: another `schema` is refused. You rarely call it yourself:
   * `HttpIdempotency` does. With a `transaction` option of your own, only leased mode works
   * (`transactionalRefusal` says why).
   *
   * @example
   * ```ts
   * const keys = store.httpKeys();
   * await keys.migrate(); // the store's migrate()
   * ```
   */
  httpKeys(options: { schema?: string } = {}): HttpKeyStore<SqlClient> {
    if (options.schema !== undefined && options.schema !== this.schema) {
      throw new ConfigError(
        'schema',
        `MySqlStore keeps HTTP idempotency keys in its own database (${JSON.stringify(this.schema)}); got ${JSON.stringify(options.schema)}: leave schema unset or open a MySqlStore on that database`,
      );
    }
    return createMySqlHttpKeys({
      schema: this.schema,
      quoted: this.quotedSchema,
      migrate: async () => (await this.migrate()).applied,
      ownsTransactions: !(this.driver instanceof CallerTransactionDriver),
    });
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
    await checkSchemaVersion(connection, this.schema, this.queries);
    this.schemaVerified = true;
  }
}
