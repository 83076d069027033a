/** SQL and the store: the contract a store implements (IdempotencyStore) and its parts. */

import type { OutboxStore } from '../outbox.js';
import type { DeadLetterLog } from './deadLetters.js';

/** The result of one SQL statement. */
export interface SqlResult<R = Record<string, unknown>> {
  rows: R[];
  rowCount: number | null;
}

/**
 * A connection inside a transaction: what handlers receive as `ctx.tx` with the Postgres
 * store. Compatible with `pg.PoolClient` and PGlite transactions.
 */
export interface SqlClient {
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
}

/** Identifies one message for one consumer: the unique key of the processed marker. */
export interface MessageKey {
  /** Consumer name: the namespace of processed IDs. */
  consumer: string;
  messageId: string;
}

/** How the store classifies an error (by SQLSTATE or socket error code, never by text). */
export type StoreErrorKind =
  /** The database cannot be reached or went away: fail closed, pause, retry later. */
  | 'unavailable'
  /** Serialization failure, deadlock or lock timeout (40001, 40P01, 55P03): retry at once, no attempt counted. */
  | 'transient'
  /** Anything else, including errors raised by the handler's own SQL. */
  | 'other';

/** Outcome of a leased-mode claim. */
export type LeaseClaim =
  | { status: 'acquired'; owner: string; takeover: boolean; lockedUntil: Date }
  /** Held by another owner until `lockedUntil`, expressed on this process's clock (the store converts). */
  | { status: 'busy'; lockedUntil: Date }
  | { status: 'completed'; result: unknown };

/**
 * Offsets kept in the same transaction as the output (`offsets` mode, Kafka).
 */
export interface OffsetStore<Tx = SqlClient> {
  /**
   * The transaction's first statement: advances the stored next offset of
   * `(consumer, topic, partition)` to `offset + 1` only when it is `<= offset`.
   * Returns false when an earlier owner already applied this record (roll back and skip).
   */
  advance(tx: Tx, consumer: string, topic: string, partition: number, offset: string): Promise<boolean>;
  /** Stored next offsets for a topic's partitions. */
  read(consumer: string, topic: string): Promise<Map<number, string>>;
}

/**
 * Payload fingerprints kept on the processed marker, for consumers with
 * `payloadFingerprint` (and `processOnce` callers that pass one). Separate statements
 * from the plain claim, so a consumer without fingerprints pays nothing for them.
 */
export interface FingerprintStore<Tx = SqlClient> {
  /**
   * Like {@link IdempotencyStore.claim}, also storing each inserted marker's fingerprint
   * (`null`: none). `entries` maps message ID to fingerprint.
   */
  claim(tx: Tx, consumer: string, entries: ReadonlyMap<string, string | null>): Promise<ReadonlySet<string>>;
  /**
   * The fingerprints stored on the markers of `messageIds`, read in `tx` when given (else
   * in a short transaction of its own). IDs with no marker or no fingerprint are absent.
   */
  read(consumer: string, messageIds: readonly string[], tx?: Tx): Promise<ReadonlyMap<string, string>>;
  /** Leased mode: {@link IdempotencyStore.completeLease}, also storing the fingerprint. */
  completeLease(key: MessageKey, owner: string, result: unknown, fingerprint: string): Promise<boolean>;
}

/**
 * A stored HTTP `Idempotency-Key` (what `@oncely/http` reads back), normalised by the store:
 * booleans are booleans, headers are JSON text, the body is bytes.
 */
export interface HttpKeyRecord {
  /** The fingerprint of the request that stored it. */
  fingerprint: string;
  status: 'in_progress' | 'completed';
  /** A leased claim whose deadline (database time) has not passed. */
  live: boolean;
  responseStatus: number | null;
  /** The stored response headers as JSON text (an object of name to value). */
  responseHeaders: string | null;
  responseBody: Uint8Array | null;
}

/** A response to store with its key. */
export interface HttpKeyResponse {
  status: number;
  /** JSON text of the headers kept. */
  headers: string;
  body: Uint8Array;
}

/**
 * The statements `@oncely/http` runs on a store's HTTP idempotency keys table, so it works
 * on every store that provides them (`PostgresStore`, `MySqlStore`) without SQL of its own.
 * Every method with `tx` runs in that transaction of the same store. Rows past retention
 * are never returned and may be taken over.
 */
export interface HttpKeyStore<Tx = SqlClient> {
  /**
   * Set when transactional mode cannot run on this store (leased mode still can), saying
   * why: `HttpIdempotency` then refuses `mode: 'transactional'` up front.
   */
  readonly transactionalRefusal?: string;
  /**
   * The longest key (and scope) in bytes the table holds, if it has a limit: `HttpIdempotency`
   * refuses a larger `maxKeyLength` up front.
   */
  readonly maxKeyBytes?: number;
  /** Creates or upgrades the keys table (idempotent, safe to run concurrently). Returns what it applied. */
  migrate(): Promise<string[]>;
  /**
   * Transactional mode: tries, without waiting, to take the key's exclusive lock for the rest
   * of `tx` (one request per key runs at a time; `locked: false` is "in progress"), and
   * reads the key's live record. The read may predate a commit that released the lock: a
   * caller that got it reads again with {@link read} before deciding to run.
   */
  tryLock(
    tx: Tx,
    scope: string,
    key: string,
  ): Promise<{ locked: boolean; record: HttpKeyRecord | undefined }>;
  /** The key's live record (not past retention), locked for `tx`. */
  read(tx: Tx, scope: string, key: string): Promise<HttpKeyRecord | undefined>;
  /** Transactional mode: stores the key as completed with `response` (insert or overwrite). */
  saveCompleted(
    tx: Tx,
    entry: {
      scope: string;
      key: string;
      fingerprint: string;
      response: HttpKeyResponse;
      retentionMs: number;
    },
  ): Promise<void>;
  /**
   * Leased mode: claims the key `in_progress` for `owner` until now + `leaseMs` (database
   * time): inserts it, or takes over a claim past its deadline with the same fingerprint,
   * or a record past retention. False when it is completed, live, or another payload's.
   */
  acquire(
    tx: Tx,
    claim: {
      scope: string;
      key: string;
      fingerprint: string;
      owner: string;
      leaseMs: number;
      retentionMs: number;
    },
  ): Promise<boolean>;
  /** Leased mode: pushes the deadline to now + `leaseMs` if `owner` still holds the claim. */
  renew(tx: Tx, claim: { scope: string; key: string; owner: string; leaseMs: number }): Promise<boolean>;
  /** Leased mode: completes the claim with `response` if `owner` still holds it. */
  complete(
    tx: Tx,
    claim: { scope: string; key: string; owner: string; response: HttpKeyResponse; retentionMs: number },
  ): Promise<boolean>;
  /** Leased mode: deletes the claim if `owner` still holds it (a failure not stored). */
  release(tx: Tx, claim: { scope: string; key: string; owner: string }): Promise<boolean>;
  /** Deletes up to `batchSize` keys past retention (never a live claim); returns how many. */
  prune(tx: Tx, batchSize: number): Promise<number>;
}

/** A duplicate whose payload differs from the one its marker was written for. */
export interface PayloadMismatch {
  /** The fingerprint stored with the marker (the first payload). */
  storedFingerprint: string;
  /** The fingerprint of the payload this delivery carries. */
  fingerprint: string;
}

/**
 * What the core needs from a store. `@oncely/postgres` implements it on `pg` and PGlite.
 * The core runs the state machine with these primitives; the store never decides
 * whether to ack.
 */
export interface IdempotencyStore<Tx = SqlClient> {
  /** Runs `work` in one transaction: commits when it resolves, rolls back when it throws. */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * Inserts processed markers for `messageIds` inside `tx` (`ON CONFLICT DO NOTHING`) and
   * returns the IDs this call inserted. An ID held by another open transaction makes the
   * call wait for it: its commit makes the ID a duplicate, its rollback hands it to us.
   */
  claim(tx: Tx, consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>>;
  /**
   * Deletes markers this transaction claimed for `messageIds` (a batch item whose work
   * failed after the batch's single claim statement): its retry must find no marker.
   */
  unclaim(tx: Tx, consumer: string, messageIds: readonly string[]): Promise<void>;
  /** Runs `work` under a savepoint of `tx`; a throw rolls back to the savepoint and rethrows. */
  savepoint<T>(tx: Tx, work: () => Promise<T>): Promise<T>;
  /**
   * Advisory attempt counter (failed runs, and runs that may crash the process):
   * increments in its own short commit and returns the new count. Never a dedup gate.
   * `run`, a token of the run counted: the same run sent again (its commit landed, its
   * answer was lost) must not be counted twice; without one, every call counts.
   */
  recordAttempt(key: MessageKey, run?: string): Promise<number>;
  /**
   * Takes one count back (a run counted up front was released instead of failing). Never
   * below zero. With `run`: only if that run is the one counted last, and only once.
   */
  forgetAttempt(key: MessageKey, run?: string): Promise<void>;
  /**
   * Deletes the attempt counter of `key`: its message is done (its marker committed), so
   * the count has no further use. Optional: a store without it keeps the row until
   * retention prunes it.
   */
  clearAttempts?(key: MessageKey): Promise<void>;
  /** Leased mode: claim `in_progress` until now + `leaseMs` (database time). */
  acquireLease(key: MessageKey, leaseMs: number): Promise<LeaseClaim>;
  /** Leased mode: extends the claim if `owner` still holds it. */
  renewLease(key: MessageKey, owner: string, leaseMs: number): Promise<boolean>;
  /**
   * Leased mode: marks completed with `result` if `owner` still holds it. True also when
   * `owner` already completed it (a retried completion), keeping the first result.
   */
  completeLease(key: MessageKey, owner: string, result: unknown): Promise<boolean>;
  /** Leased mode: gives the claim up (after a failure) if `owner` still holds it. */
  releaseLease(key: MessageKey, owner: string): Promise<void>;
  /** Classifies an error thrown by any of these methods or by handler SQL. */
  classifyError(error: unknown): StoreErrorKind;
  /** Cheap round trip used to detect that the store is back after an outage. */
  ping(): Promise<void>;
  /** Present on stores that can keep Kafka offsets (`offsets` mode). */
  readonly offsets?: OffsetStore<Tx>;
  /** Present on stores that keep payload fingerprints on markers (`payloadFingerprint`). */
  readonly fingerprints?: FingerprintStore<Tx>;
  /** Present on stores with a transactional outbox (`ctx.publish`). */
  readonly outbox?: OutboxStore<Tx>;
  /**
   * Present on stores that can hold `@oncely/http`'s idempotency keys: the statements on
   * that table, in `schema` (default: the store's; a store may refuse another).
   */
  httpKeys?(options?: { schema?: string }): HttpKeyStore<Tx>;
  /** Present on stores that keep the dead-letter discard log and answer marker look-ups (`oncely dlq`). */
  readonly deadLetterLog?: DeadLetterLog;
  close(): Promise<void>;
}
