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
import type { ApplyIfNewerOptions } from './applyIfNewer.js';
import { applyIfNewer } from './applyIfNewer.js';
import { classifyStoreError } from './classifyError.js';
import { buildFingerprintQueries, createFingerprintStore } from './fingerprints.js';
import { quoteSchemaName } from './identifiers.js';
import type { PostgresOutbox } from './outbox/PostgresOutbox.js';
import { buildQueries } from './queries.js';
import { clearAttempts, forgetAttempt, recordAttempt } from './store/attempts.js';
import { claim, savepoint, unclaim } from './store/claims.js';
import { createDeadLetterLog } from './store/deadLetterLog.js';
import { createPostgresHttpKeys } from './store/httpKeys.js';
import { acquireLease, completeLease, releaseLease, renewLease } from './store/leases.js';
import { createOffsetStore } from './store/offsets.js';
import type { EmbeddedStoreOptions, PostgresStoreOptions } from './store/options.js';
import { createDriver } from './store/options.js';
import type { PruneOptions } from './store/retention.js';
import { prune } from './store/retention.js';
import { StoreCore } from './store/StoreCore.js';
import type { MigrateResult } from './store/schema.js';
import { migrate } from './store/schema.js';
import { toJson } from './store/values.js';

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
  /** Marker look-ups and the discard log of `oncely dlq` (`DeadLetters`). */
  readonly deadLetterLog: DeadLetterLog;
  /**
   * The driver, the SQL, the schema check and the transaction path every concern shares;
   * each concern's code is in src/store/ (claims, attempts, leases, offsets, retention, schema).
   */
  private readonly core: StoreCore;
  private isClosed = false;

  constructor(options: PostgresStoreOptions) {
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('store', 'options are required');
    const fromEnv = options.schema === undefined ? process.env.ONCELY_SCHEMA || undefined : undefined;
    this.schema = options.schema ?? fromEnv ?? 'oncely';
    const quotedSchema = quoteSchemaName(
      this.schema,
      fromEnv === undefined ? 'schema' : 'schema (from ONCELY_SCHEMA)',
    );
    const queries = buildQueries(quotedSchema);
    const lockTimeoutMs = options.lockTimeoutMs ?? 5000;
    if (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 0) {
      throw new ConfigError('lockTimeoutMs', `must be a non-negative integer; got ${options.lockTimeoutMs}`);
    }
    // The claims, and offsets mode's claim (the offset upsert), may ride in BEGIN's round
    // trip on pg (see PgDriver.open).
    const driver = createDriver(options, new Set([queries.claimOne, queries.claim, queries.advanceOffset]));
    const core = new StoreCore(this.schema, quotedSchema, queries, driver, lockTimeoutMs);
    this.core = core;
    this.outbox = core.outbox;
    this.offsets = createOffsetStore.call(core);
    this.deadLetterLog = createDeadLetterLog(core);
    this.fingerprints = createFingerprintStore(buildFingerprintQueries(quotedSchema), {
      run: (operation, work) => core.run(operation, work),
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
  migrate(): Promise<MigrateResult> {
    return migrate.call(this.core);
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
    return this.core.run('transaction()', work);
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
  claim(tx: SqlClient, consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>> {
    return claim.call(this.core, tx, consumer, messageIds);
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
  unclaim(tx: SqlClient, consumer: string, messageIds: readonly string[]): Promise<void> {
    return unclaim.call(this.core, tx, consumer, messageIds);
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
  savepoint<T>(tx: SqlClient, work: () => Promise<T>): Promise<T> {
    return savepoint.call<StoreCore, [SqlClient, () => Promise<T>], Promise<T>>(this.core, tx, work);
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
    return recordAttempt.call(this.core, key, run);
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
  forgetAttempt(key: MessageKey, run?: string): Promise<void> {
    return forgetAttempt.call(this.core, key, run);
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
  clearAttempts(key: MessageKey): Promise<void> {
    return clearAttempts.call(this.core, key);
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
    return acquireLease.call(this.core, key, leaseMs);
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
    return renewLease.call(this.core, key, owner, leaseMs);
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
    return completeLease.call(this.core, key, owner, result);
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
  releaseLease(key: MessageKey, owner: string): Promise<void> {
    return releaseLease.call(this.core, key, owner);
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
    if (this.core.schemaVerified) {
      await this.core.driver.ping();
      return;
    }
    await this.core.run('ping()', async () => {});
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
  prune(options: PruneOptions): Promise<number> {
    return prune.call(this.core, options);
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
    return this.core.driver.listen?.(channel, onNotify, onLost);
  }

  /**
   * The statements `@oncely/http` runs on its idempotency keys table
   * (`<schema>.http_idempotency_keys`, created by its `migrate()`), in `schema` (default:
   * the store's). You rarely call it yourself: `HttpIdempotency` does.
   *
   * @example
   * ```ts
   * const keys = store.httpKeys();
   * await keys.migrate();
   * ```
   */
  httpKeys(options: { schema?: string } = {}): HttpKeyStore<SqlClient> {
    return createPostgresHttpKeys(options.schema ?? this.schema, (work) => this.transaction(work));
  }

  /** True once `close()` was called. A running relay checks it and stops. */
  get closed(): boolean {
    return this.isClosed;
  }

  /**
   * Closes what the store owns: the pool it created from `connectionString`, the PGlite it
   * started. A `pool`, `pglite` or `transaction` you passed in stays yours. It also ends
   * the store's `LISTEN` connections: an outbox relay still running stops (it emits one
   * `error` saying the store was closed; its rows stay pending). Stop the relay first.
   *
   * @example
   * ```ts
   * await relay.stop();
   * await consumer.stop();
   * await store.close();
   * ```
   */
  close(): Promise<void> {
    // Before the driver closes: the relay, woken by its ended LISTEN, must see it.
    this.isClosed = true;
    return this.core.driver.close();
  }
}
