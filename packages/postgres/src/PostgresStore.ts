import { randomUUID } from 'node:crypto';
import type {
  FingerprintStore,
  IdempotencyStore,
  LeaseClaim,
  Logger,
  MessageKey,
  OffsetStore,
  SqlClient,
  SqlResult,
  StoreErrorKind,
} from '@oncely/core';
import { ConfigError, stderrLogger, toLogger } from '@oncely/core';
import type { ApplyIfNewerOptions } from './applyIfNewer.js';
import { applyIfNewer } from './applyIfNewer.js';
import { classifyStoreError, markFromStoreConnection } from './classifyError.js';
import type { CallerTransaction } from './drivers/CallerTransactionDriver.js';
import { CallerTransactionDriver } from './drivers/CallerTransactionDriver.js';
import type { PgPoolLike, PgTimeouts } from './drivers/PgDriver.js';
import { PgDriver } from './drivers/PgDriver.js';
import type { PgliteLike } from './drivers/PgliteDriver.js';
import { PgliteDriver } from './drivers/PgliteDriver.js';
import type { StoreDriver } from './drivers/StoreDriver.js';
import { SchemaVersionError, TransactionAbortedError, TransactionEndedError } from './errors.js';
import { buildFingerprintQueries, createFingerprintStore } from './fingerprints.js';
import { quoteSchemaName } from './identifiers.js';
import { LATEST_VERSION, MIGRATIONS } from './migrations/index.js';
import { PostgresOutbox } from './outbox/PostgresOutbox.js';
import type { StoreQueries } from './queries.js';
import { buildQueries } from './queries.js';

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

/**
 * What {@link PostgresStore.prune} deletes.
 *
 * @example
 * ```ts
 * await store.prune({ olderThan: 14 * 24 * 3600 * 1000, batchSize: 5000, consumer: 'payments' });
 * ```
 */
export interface PruneOptions {
  /**
   * Completed markers processed before this are deleted: a `Date`, or an age in ms
   * measured on the database clock (`86_400_000` = older than a day). Keep it longer than
   * the broker's redelivery horizon: a message redelivered after its marker was pruned
   * is processed again.
   */
  olderThan: Date | number;
  /** Rows deleted per transaction. @default 1000 */
  batchSize?: number;
  /** Only this consumer's markers. @default every consumer */
  consumer?: string;
  /** Count the markers that would go, delete nothing. @default false */
  dryRun?: boolean;
  /** Called after each batch of markers with the running total deleted (a progress bar). */
  onProgress?: (deleted: number) => void;
}

/**
 * What {@link PostgresStore.migrate} did.
 *
 * @example
 * ```ts
 * const { applied, version } = await store.migrate();
 * ```
 */
export interface MigrateResult {
  /** Names of the migrations this call applied (empty when the schema was up to date). */
  applied: string[];
  /** The schema version now. */
  version: number;
}

/** Names the key in `(class, key)` advisory locks taken by `migrate()`: ASCII "once". */
const MIGRATION_LOCK_CLASS = 0x6f6e6365;

/** acquireLease re-reads at most this often when the row it ran into vanished meanwhile. */
const ACQUIRE_ATTEMPTS = 3;

/**
 * The PostgreSQL store: processed markers written in the handler's transaction, leased
 * claims, advisory attempt counters and Kafka offsets. Works on `pg` (production) and
 * PGlite (embedded, one transaction at a time) with the same SQL.
 *
 * @example
 * ```ts
 * const store = new PostgresStore({ connectionString: process.env.DATABASE_URL });
 * await store.migrate();
 * const outcome = await processOnce(store, { consumer: 'payments', messageId: 'm-1' }, async (tx) => {
 *   await tx.query('INSERT INTO payments(order_id, amount) VALUES ($1, $2)', ['o-1', 40]);
 * });
 * await store.close();
 * ```
 */
export class PostgresStore implements IdempotencyStore<SqlClient> {
  /**
   * An embedded PGlite store: PostgreSQL in-process, in memory or in `dataDir`.
   * `@electric-sql/pglite` must be installed; it is loaded on first use (a missing
   * package fails that call with `DriverNotInstalledError`). One connection: one
   * transaction at a time; calling the store from inside its own transaction throws
   * `StoreReentrancyError`.
   *
   * @example
   * ```ts
   * const store = PostgresStore.embedded({ dataDir: './oncely-data' });
   * await store.migrate();
   * ```
   */
  static embedded(options: EmbeddedStoreOptions = {}): PostgresStore {
    return new PostgresStore({
      schema: options.schema,
      lockTimeoutMs: options.lockTimeoutMs,
      embedded: { dataDir: options.dataDir },
    });
  }

  /** The schema holding the store's tables (unquoted). */
  readonly schema: string;
  /** Kafka offsets kept in the same transaction as the output (`offsets` mode). */
  readonly offsets: OffsetStore<SqlClient>;
  /** Payload fingerprints on the markers (`payloadFingerprint` consumers, `processOnce` with a fingerprint). */
  readonly fingerprints: FingerprintStore<SqlClient>;
  /** The transactional outbox: `ctx.publish` writes here; `createRelay` sends it. */
  readonly outbox: PostgresOutbox;
  private readonly quotedSchema: string;
  private readonly queries: StoreQueries;
  private readonly driver: StoreDriver;
  private readonly lockTimeoutMs: number;
  /** Set once the schema was found at this package's version; checked on first use. */
  private schemaVerified = false;
  private savepoints = 0;

  constructor(options: PostgresStoreOptions) {
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('store', 'options are required');
    const fromEnv = options.schema === undefined ? process.env.ONCELY_SCHEMA || undefined : undefined;
    this.schema = options.schema ?? fromEnv ?? 'oncely';
    this.quotedSchema = quoteSchemaName(
      this.schema,
      fromEnv === undefined ? 'schema' : 'schema (from ONCELY_SCHEMA)',
    );
    this.queries = buildQueries(this.quotedSchema);
    this.lockTimeoutMs = options.lockTimeoutMs ?? 5000;
    if (!Number.isInteger(this.lockTimeoutMs) || this.lockTimeoutMs < 0) {
      throw new ConfigError('lockTimeoutMs', `must be a non-negative integer; got ${options.lockTimeoutMs}`);
    }
    // The claims, and offsets mode's claim (the offset upsert), may ride in BEGIN's round
    // trip on pg (see PgDriver.open).
    this.driver = createDriver(
      options,
      new Set([this.queries.claimOne, this.queries.claim, this.queries.advanceOffset]),
    );
    this.outbox = new PostgresOutbox(this.quotedSchema, (operation, work) => this.run(operation, work));
    this.offsets = {
      advance: async (tx, consumer, topic, partition, offset) => {
        // All four as text (the statement casts them): only strings are inlined into BEGIN's message.
        const { rows } = await tx.query(this.queries.advanceOffset, [
          consumer,
          topic,
          String(partition),
          String(offset),
        ]);
        return rows.length === 1;
      },
      read: (consumer, topic) =>
        this.run('offsets.read()', async (client) => {
          const { rows } = await client.query<{ partition: number; next_offset: string }>(
            this.queries.readOffsets,
            [consumer, topic],
          );
          return new Map(rows.map((row) => [Number(row.partition), String(row.next_offset)]));
        }),
    };
    this.fingerprints = createFingerprintStore(buildFingerprintQueries(this.quotedSchema), {
      run: (operation, work) => this.run(operation, work),
      toJson,
    });
  }

  /**
   * Applies pending migrations in one transaction under an advisory lock: concurrent
   * callers (several instances starting at once) wait for each other and the later ones
   * find nothing to do. Each migration first inserts its own row in
   * `<schema>.migrations`, so even a migrator that skipped the lock would conflict (23505)
   * instead of applying it twice. Refuses a schema migrated by a newer version of this
   * package ({@link SchemaVersionError}).
   *
   * @example
   * ```ts
   * const { applied } = await store.migrate();
   * if (applied.length) console.log('applied', applied.join(', '));
   * ```
   */
  async migrate(): Promise<MigrateResult> {
    const q = this.queries;
    const applied = await this.run(
      'migrate()',
      async (client) => {
        await client.query('SELECT pg_advisory_xact_lock($1::integer, hashtext($2::text))', [
          MIGRATION_LOCK_CLASS,
          this.schema,
        ]);
        // Checked first so a role without CREATE on the database can migrate a schema an
        // administrator created for it.
        if (!(await present(client, q.schemaExists, this.schema))) await client.query(q.createSchema);
        if (!(await present(client, q.tableExists, q.migrationsRegclass)))
          await client.query(q.createMigrationsTable);
        const applied = await readVersions(client, q);
        const newest = Math.max(0, ...applied);
        if (newest > LATEST_VERSION) throw new SchemaVersionError(this.schema, newest, LATEST_VERSION);
        // Every migration not yet recorded, not only those above the newest: a database
        // migrated by a build that shipped a later number first still gets the earlier one.
        const pending = MIGRATIONS.filter((migration) => !applied.has(migration.version));
        for (const migration of pending) {
          await client.query(q.insertMigration, [migration.version, migration.name]);
          for (const statement of migration.statements) {
            await client.query(statement.replaceAll('{{schema}}', this.quotedSchema));
          }
        }
        return pending.map((migration) => migration.name);
      },
      // DDL may wait for running store transactions; the advisory lock waits for other migrators.
      { verify: false, lockTimeoutMs: undefined },
    );
    this.schemaVerified = true;
    return { applied, version: LATEST_VERSION };
  }

  /**
   * Runs `work` in one transaction: commits when it resolves, rolls back when it throws.
   * On `pg`: READ COMMITTED, `lock_timeout` set, and the client is discarded rather than
   * pooled if its connection broke. On PGlite: queued behind other transactions; throws
   * `StoreReentrancyError` when called from inside one.
   *
   * @example
   * ```ts
   * const claimed = await store.transaction(async (tx) => {
   *   const ids = await store.claim(tx, 'payments', ['m-1', 'm-2']);
   *   for (const id of ids) await tx.query('INSERT INTO effects(id) VALUES ($1)', [id]);
   *   return ids;
   * });
   * ```
   */
  transaction<T>(work: (tx: SqlClient) => Promise<T>): Promise<T> {
    return this.run('transaction()', work);
  }

  /**
   * Inserts completed markers for `messageIds` in `tx` and returns the IDs this call
   * inserted. IDs are de-duplicated and sorted first, so batches that share IDs lock them
   * in the same order and cannot deadlock. An ID held by another open transaction waits
   * for it: its commit makes the ID a duplicate, its rollback hands it to us.
   *
   * @example
   * ```ts
   * await store.transaction(async (tx) => {
   *   const fresh = await store.claim(tx, 'payments', ['m-1']);
   *   if (fresh.has('m-1')) await tx.query('INSERT INTO payments(order_id) VALUES ($1)', ['o-1']);
   * });
   * ```
   */
  async claim(tx: SqlClient, consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>> {
    // One ID (every processOnce) needs neither de-duplication nor sorting.
    const ids = messageIds.length === 1 ? messageIds : [...new Set(messageIds)].sort();
    if (ids.length === 0) return new Set();
    // The one-message path is the hot one: a plain VALUES insert plans faster than unnest.
    const { rows } =
      ids.length === 1
        ? await tx.query<{ message_id: string }>(this.queries.claimOne, [consumer, ids[0]])
        : await tx.query<{ message_id: string }>(this.queries.claim, [consumer, ids]);
    return new Set(rows.map((row) => row.message_id));
  }

  /**
   * Deletes markers for `messageIds` inside `tx`: a batch item whose work failed gives
   * its claim back, so the retry is not mistaken for a duplicate. Call it only for IDs
   * this transaction claimed.
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
   * Runs `work` under a savepoint of `tx`; a throw rolls back to the savepoint (keeping the
   * rest of the transaction) and rethrows.
   *
   * @example
   * ```ts
   * await store.transaction(async (tx) => {
   *   for (const id of await store.claim(tx, 'c', ids)) {
   *     await store.savepoint(tx, () => apply(tx, id)).catch(() => failed.push(id));
   *   }
   * });
   * ```
   */
  async savepoint<T>(tx: SqlClient, work: () => Promise<T>): Promise<T> {
    const name = `oncely_sp_${++this.savepoints}`;
    await tx.query(`SAVEPOINT ${name}`);
    let result: T;
    try {
      result = await work();
    } catch (error) {
      // If this fails too the transaction is unusable and its COMMIT will fail; the
      // handler's error is the one worth reporting.
      await tx.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => {});
      throw error;
    }
    try {
      // Fails (25P02) when `work` caught a statement error itself: the savepoint's part of
      // the transaction is aborted. Rolling back to it keeps the rest of the transaction
      // committable, and the throw makes this item a failure rather than a silent loss.
      await tx.query(`RELEASE SAVEPOINT ${name}`);
    } catch (error) {
      await tx.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => {});
      throw error;
    }
    return result;
  }

  /**
   * Increments the advisory attempt counter of `key` in its own short commit and returns
   * the new count. The core counts failed runs and, up front, runs of possible
   * redeliveries (so a message that crashes the process still reaches `maxAttempts`).
   * `run`, a token of this run: sent again for the same run (its answer was lost), the
   * count is not incremented twice. Never a dedup gate.
   * @example
   * ```ts
   * const attempt = await store.recordAttempt({ consumer: 'payments', messageId: 'm-1' }, randomUUID());
   * ```
   */
  recordAttempt(key: MessageKey, run?: string): Promise<number> {
    return this.attemptStatement(
      this.queries.recordAttempt,
      [key.consumer, key.messageId, run ?? null],
      'recordAttempt()',
    ).then((rows) => Number(rows[0]!.attempts));
  }

  /**
   * Takes one count of `key` back (a run counted up front ended in a release, which is
   * never an attempt). Never goes below zero. With `run`, only that run's count, if it is
   * the one counted last, and once.
   * @example
   * ```ts
   * await store.forgetAttempt({ consumer: 'payments', messageId: 'm-1' }, run);
   * ```
   */
  async forgetAttempt(key: MessageKey, run?: string): Promise<void> {
    await this.attemptStatement(
      this.queries.forgetAttempt,
      [key.consumer, key.messageId, run ?? null],
      'forgetAttempt()',
    );
  }

  /**
   * Deletes the attempt counter of `key` (its marker committed: the count has no further
   * use), in its own short commit. The core calls it after a counted run's message was
   * processed or found a duplicate, so the happy path leaves no attempts rows behind.
   * @example
   * ```ts
   * await store.clearAttempts({ consumer: 'payments', messageId: 'm-1' });
   * ```
   */
  async clearAttempts(key: MessageKey): Promise<void> {
    await this.attemptStatement(this.queries.clearAttempts, [key.consumer, key.messageId], 'clearAttempts()');
  }

  private async attemptStatement(
    sql: string,
    params: unknown[],
    operation: string,
  ): Promise<Array<{ attempts: number }>> {
    // Once the schema is known good, the counter is one autocommit statement: one round
    // trip instead of BEGIN / statement / COMMIT.
    const { rows } =
      this.schemaVerified && this.driver.statement
        ? await this.driver.statement<{ attempts: number }>(sql, params)
        : await this.run(operation, (client) => client.query<{ attempts: number }>(sql, params));
    return rows;
  }

  /**
   * Leased mode: claims `key` as `in_progress` until now + `leaseMs` on the database
   * clock, with a fresh random owner token, in one statement: a new row is `acquired`; a
   * live claim is `busy`; an expired one is taken over (`acquired`, `takeover: true`, new
   * owner); a completed one returns its stored result.
   *
   * @example
   * ```ts
   * const claim = await store.acquireLease({ consumer: 'reports', messageId: 'm-1' }, 30_000);
   * if (claim.status === 'acquired') {
   *   const result = await buildReport();
   *   await store.completeLease({ consumer: 'reports', messageId: 'm-1' }, claim.owner, result);
   * }
   * ```
   */
  acquireLease(key: MessageKey, leaseMs: number): Promise<LeaseClaim> {
    assertLeaseMs(leaseMs);
    const owner = randomUUID();
    const q = this.queries;
    return this.run('acquireLease()', async (client) => {
      for (let attempt = 1; ; attempt++) {
        const acquired = await client.query<{ locked_until: Date; inserted: boolean }>(q.acquireLease, [
          key.consumer,
          key.messageId,
          leaseMs,
          owner,
        ]);
        const row = acquired.rows[0];
        if (row)
          return {
            status: 'acquired',
            owner,
            takeover: !row.inserted,
            lockedUntil: toDate(row.locked_until),
          };
        // The conflicting row is completed or still held. ON CONFLICT locked it for us,
        // so it cannot change before this read.
        const existing = await client.query<{
          status: string;
          locked_until: Date | null;
          result: unknown;
          remaining_ms: number | null;
        }>(q.readLease, [key.consumer, key.messageId]);
        const current = existing.rows[0];
        if (current?.status === 'completed') return { status: 'completed', result: current.result ?? null };
        // On this process's clock: the database's deadline minus the database's now, added
        // to ours, so a caller waiting until `lockedUntil` is not misled by clock skew.
        if (current)
          return { status: 'busy', lockedUntil: new Date(Date.now() + Number(current.remaining_ms ?? 0)) };
        if (attempt >= ACQUIRE_ATTEMPTS)
          throw new Error(`acquireLease: the row of ${key.messageId} kept changing`);
      }
    });
  }

  /**
   * Leased mode: pushes the claim's deadline to now + `leaseMs` (database clock) if
   * `owner` still holds it. False means another consumer took it over.
   *
   * @example
   * ```ts
   * if (!(await store.renewLease(key, claim.owner, 30_000))) abortWork();
   * ```
   */
  renewLease(key: MessageKey, owner: string, leaseMs: number): Promise<boolean> {
    assertLeaseMs(leaseMs);
    return this.run('renewLease()', async (client) => {
      const { rows } = await client.query(this.queries.renewLease, [
        key.consumer,
        key.messageId,
        owner,
        leaseMs,
      ]);
      return rows.length === 1;
    });
  }

  /**
   * Leased mode: marks the claim completed with `result` (stored as JSON and returned to
   * later deliveries) if `owner` still holds it. Idempotent for the owner: when the claim
   * is already completed by `owner` (a retry whose first answer was lost in an outage) it
   * returns true and keeps the stored result. A result JSON cannot encode (a BigInt, a
   * cycle) is stored as null rather than leaving the work uncompleted.
   *
   * @example
   * ```ts
   * const done = await store.completeLease(key, claim.owner, { reportId: 'r-9' });
   * ```
   */
  completeLease(key: MessageKey, owner: string, result: unknown): Promise<boolean> {
    const json = toJson(result);
    return this.run('completeLease()', async (client) => {
      const { rows } = await client.query(this.queries.completeLease, [
        key.consumer,
        key.messageId,
        owner,
        json,
      ]);
      return rows.length === 1;
    });
  }

  /**
   * Leased mode: gives the claim up (deletes the `in_progress` row) if `owner` still
   * holds it, so a retry can run at once.
   *
   * @example
   * ```ts
   * try { await work(); } catch (error) { await store.releaseLease(key, claim.owner); throw error; }
   * ```
   */
  async releaseLease(key: MessageKey, owner: string): Promise<void> {
    await this.run('releaseLease()', (client) =>
      client.query(this.queries.releaseLease, [key.consumer, key.messageId, owner]),
    );
  }

  /**
   * Classifies an error by SQLSTATE or socket code, never by message text (see
   * `classifyPostgresError`). Only the store's own connections can make an error
   * `'unavailable'`: a socket error from anything else a handler called is `'other'`.
   *
   * @example
   * ```ts
   * if (store.classifyError(error) === 'unavailable') pauseConsuming();
   * ```
   */
  classifyError(error: unknown): StoreErrorKind {
    return classifyStoreError(error);
  }

  /**
   * One cheap round trip. Until the schema has been seen at this package's version, it
   * also checks that (so a consumer stays paused while the schema is missing or too new).
   *
   * @example
   * ```ts
   * await store.ping(); // throws StoreUnavailableError while the database is down
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
   * Deletes completed markers older than `olderThan`, `batchSize` rows per transaction
   * (oldest first, over the `processed_at` index), attempt counters not touched since
   * then, and (without `consumer`) outbox rows sent before then. Claims in progress and
   * unsent outbox rows are never deleted. Returns the number of markers deleted.
   *
   * @example
   * ```ts
   * // nightly: forget messages processed more than 14 days ago
   * const deleted = await store.prune({ olderThan: 14 * 24 * 3600 * 1000 });
   * ```
   */
  async prune(options: PruneOptions): Promise<number> {
    const { olderThan, batchSize = 1000, consumer } = options;
    if (!Number.isInteger(batchSize) || batchSize < 1) {
      throw new ConfigError('batchSize', `must be a positive integer; got ${batchSize}`);
    }
    let cutoff: Date;
    if (olderThan instanceof Date) {
      cutoff = olderThan;
    } else if (typeof olderThan === 'number' && Number.isFinite(olderThan) && olderThan >= 0) {
      cutoff = await this.run('prune()', async (client) => {
        const { rows } = await client.query<{ cutoff: Date }>(
          `SELECT now() - $1::double precision * interval '1 millisecond' AS cutoff`,
          [olderThan],
        );
        return toDate(rows[0]!.cutoff);
      });
    } else {
      throw new ConfigError(
        'olderThan',
        `must be a Date or a non-negative number of ms; got ${String(olderThan)}`,
      );
    }
    const withConsumer = consumer !== undefined;
    if (options.dryRun) {
      return this.run('prune()', async (client) => {
        const { rows } = await client.query<{ n: number }>(
          this.queries.countPrunableMarkers(withConsumer),
          withConsumer ? [cutoff, consumer] : [cutoff],
        );
        return rows[0]!.n;
      });
    }
    const params = withConsumer ? [cutoff, batchSize, consumer] : [cutoff, batchSize];
    const markers = await this.deleteInBatches(
      this.queries.pruneMarkers(withConsumer),
      params,
      batchSize,
      options.onProgress,
    );
    await this.deleteInBatches(this.queries.pruneAttempts(withConsumer), params, batchSize);
    // Sent outbox rows age out with the markers (they belong to no one consumer).
    if (!withConsumer)
      await this.deleteInBatches(this.outbox.queries.pruneSent, [cutoff, batchSize], batchSize);
    return markers;
  }

  /**
   * Version-guarded upsert in `tx`: writes the row only when `version` is greater than
   * the stored one. See {@link applyIfNewer}.
   *
   * @example
   * ```ts
   * await store.applyIfNewer(ctx.tx, { table: 'order_status', key: { order_id: id }, version: seq, values: { status } });
   * ```
   */
  applyIfNewer(tx: SqlClient, options: ApplyIfNewerOptions): Promise<boolean> {
    return applyIfNewer(tx, options);
  }

  /**
   * Subscribes to a notification channel on a connection of its own; resolves with the
   * unsubscribe function, or undefined where the store cannot listen (caller
   * transactions). Used by the outbox relay to wake up.
   *
   * @example
   * ```ts
   * const stop = await store.listen('oncely_outbox', (payload) => wake(), (error) => relisten());
   * ```
   */
  async listen(
    channel: string,
    onNotify: (payload: string) => void,
    onLost: (error: unknown) => void,
  ): Promise<(() => Promise<void>) | undefined> {
    return this.driver.listen?.(channel, onNotify, onLost);
  }

  /**
   * Closes what the store owns: the pool it created from `connectionString`, the PGlite it
   * started. A `pool`, `pglite` or `transaction` you passed in stays yours.
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

  private async deleteInBatches(
    sql: string,
    params: unknown[],
    batchSize: number,
    onProgress?: (deleted: number) => void,
  ): Promise<number> {
    let total = 0;
    for (;;) {
      // One short transaction per batch: locks are held briefly and other work interleaves.
      const deleted = await this.run(
        'prune()',
        async (client) => (await client.query(sql, params)).rows.length,
      );
      total += deleted;
      onProgress?.(total);
      if (deleted < batchSize) return total;
    }
  }

  /** Every store transaction: first use also checks the schema version. */
  private run<T>(
    operation: string,
    work: (client: SqlClient) => Promise<T>,
    options: { verify?: boolean; lockTimeoutMs?: number | undefined } = {},
  ): Promise<T> {
    const verify = options.verify ?? true;
    const lockTimeoutMs = 'lockTimeoutMs' in options ? options.lockTimeoutMs : this.lockTimeoutMs;
    return this.driver.transaction(
      operation,
      async (client) => {
        const connection = new StoreConnection(client);
        try {
          if (verify && !this.schemaVerified) await this.verifySchema(connection);
          const result = await work(connection);
          // Checked here rather than inside: an await of an async call per transaction
          // that, on the usual path, has nothing to check.
          if (connection.statementFailed) await connection.assertCommittable();
          return result;
        } finally {
          // A handler still holding ctx.tx (it ignored its timeout) must not send
          // statements on a connection that is about to be committed, or back in the pool
          // serving someone else's transaction.
          connection.end();
        }
      },
      lockTimeoutMs,
    );
  }

  /**
   * Refuses a schema that is missing, behind, or migrated by a newer version of this
   * package. Checked once per store; a failure is checked again next time (someone may
   * migrate meanwhile).
   */
  private async verifySchema(client: SqlClient): Promise<void> {
    const q = this.queries;
    const applied = (await present(client, q.tableExists, q.migrationsRegclass))
      ? await readVersions(client, q)
      : new Set<number>();
    const version = schemaVersion(applied);
    if (version !== LATEST_VERSION) throw new SchemaVersionError(this.schema, version, LATEST_VERSION);
    this.schemaVerified = true;
  }
}

/**
 * The store's side of one transaction's connection (what handlers get as `ctx.tx`). It
 * marks every error a statement raises as coming from the store's connection (only those
 * may declare the store unavailable), and remembers that one failed: a caller that caught
 * it may have left the transaction aborted, and `assertCommittable` then refuses to let
 * the COMMIT pass as a success on any driver, including a caller's own transaction whose
 * COMMIT the store never sees.
 */
class StoreConnection implements SqlClient {
  private failed: unknown;
  /** A statement failed (its error perhaps caught): see assertCommittable. */
  statementFailed = false;
  private ended = false;

  constructor(private readonly inner: SqlClient) {}

  /** The transaction's work is over: later statements are refused. */
  end(): void {
    this.ended = true;
  }

  // Not async: one promise per statement instead of three (every handler statement passes here).
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    let answer: Promise<SqlResult<R>>;
    try {
      answer = params === undefined ? this.inner.query<R>(text) : this.inner.query<R>(text, params);
    } catch (error) {
      return Promise.reject(this.failure(error));
    }
    return answer.then(undefined, this.rethrow);
  }

  private readonly rethrow = (error: unknown): never => {
    throw this.failure(error);
  };

  /** Marks a statement's error as the store's and remembers the first one. */
  private failure(error: unknown): unknown {
    markFromStoreConnection(error);
    if (!this.statementFailed) {
      this.statementFailed = true;
      this.failed = error;
    }
    return error;
  }

  /**
   * After the work resolved: when a statement failed (and was caught), one more round
   * trip tells whether the transaction is still usable (a savepoint rolled back) or
   * aborted (25P02), in which case the commit would silently roll back.
   */
  async assertCommittable(): Promise<void> {
    if (!this.statementFailed) return;
    try {
      await this.inner.query('SELECT 1');
    } catch (error) {
      markFromStoreConnection(error);
      if ((error as { code?: unknown }).code !== '25P02') throw error;
      throw new TransactionAbortedError(
        `a statement failed and its error was caught (${errorCode(this.failed)})`,
        {
          cause: this.failed,
        },
      );
    }
  }
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? `SQLSTATE ${code}` : 'no SQLSTATE';
}

function createDriver(options: PostgresStoreOptions, mergeable: ReadonlySet<string>): StoreDriver {
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

async function present(client: SqlClient, sql: string, name: string): Promise<boolean> {
  const { rows } = await client.query<{ present: boolean }>(sql, [name]);
  return rows[0]?.present === true;
}

async function readVersions(client: SqlClient, q: StoreQueries): Promise<Set<number>> {
  const { rows } = await client.query<{ version: number }>(q.readMigrationVersions);
  return new Set(rows.map((row) => Number(row.version)));
}

/**
 * The version a schema is usable at: its newest migration when that is newer than this
 * package knows, else the last of this package's migrations before the first one missing.
 */
function schemaVersion(applied: ReadonlySet<number>): number {
  const newest = Math.max(0, ...applied);
  if (newest > LATEST_VERSION) return newest;
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

function toDate(value: unknown): Date {
  return value instanceof Date ? value : new Date(value as string);
}

function toJson(result: unknown): string {
  try {
    return JSON.stringify(result ?? null) ?? 'null';
  } catch {
    return 'null';
  }
}
