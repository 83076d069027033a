import { createHash } from 'node:crypto';
import type { HttpKeyRecord, HttpKeyStore, SqlClient } from '@oncely/core';
import { StoreConnection } from './StoreConnection.js';

const NOW = 'UTC_TIMESTAMP(6)';

/** Longest scope and key in bytes (UTF-8): the columns of migration 0002. */
const MAX_KEY_BYTES = 1024;

/**
 * Why transactional mode cannot run on a caller's own transaction: the key's lock is a
 * session lock (`GET_LOCK`) that must be held until the commit and released after it,
 * and only the store's own pool sees the commit.
 */
export const CALLER_TRANSACTION_REFUSAL =
  "MySqlStore with a `transaction` option of your own cannot run @oncely/http's transactional mode (the key's GET_LOCK must be released after your commit, which the store does not see): use mode 'leased', or a MySqlStore on a pool";

/** The statements on `<schema>.http_idempotency_keys` (migration 0002), `?` placeholders. */
function buildHttpQueries(s: string) {
  const t = `${s}.http_idempotency_keys`;
  const live = `(locked_until IS NOT NULL AND locked_until > ${NOW})`;
  const columns = `fingerprint, status, ${live} AS live, response_status, response_headers, response_body`;
  return {
    /** lock name: a session lock, taken without waiting (1 taken, 0 held by another session). */
    tryLock: 'SELECT GET_LOCK(?, 0) AS locked',
    releaseLock: 'DO RELEASE_LOCK(?)',
    /** scope, key: the live row, plain read (READ COMMITTED: the latest commit, no wait). */
    peek: `SELECT ${columns} FROM ${t} WHERE scope = ? AND idempotency_key = ? AND expires_at > ${NOW}`,
    /** scope, key: the live row, locked. */
    read: `SELECT ${columns} FROM ${t} WHERE scope = ? AND idempotency_key = ? AND expires_at > ${NOW} FOR UPDATE`,
    /** scope, key, fingerprint, status, headers, body, retention µs. */
    saveCompleted: `INSERT INTO ${t} (scope, idempotency_key, fingerprint, status, owner, locked_until,
        response_status, response_headers, response_body, created_at, expires_at)
      VALUES (?, ?, ?, 'completed', NULL, NULL, ?, ?, ?, ${NOW}, ${NOW} + INTERVAL ? MICROSECOND)
      ON DUPLICATE KEY UPDATE fingerprint = VALUES(fingerprint), status = 'completed', owner = NULL,
        locked_until = NULL, response_status = VALUES(response_status),
        response_headers = VALUES(response_headers), response_body = VALUES(response_body),
        created_at = VALUES(created_at), expires_at = VALUES(expires_at)`,
    /**
     * scope, key, fingerprint, owner, lease µs, retention µs: a new claim, or no change to
     * an existing row (`scope = scope`), locked either way.
     */
    insertOrLockClaim: `INSERT INTO ${t} (scope, idempotency_key, fingerprint, status, owner, locked_until, created_at, expires_at)
      VALUES (?, ?, ?, 'in_progress', ?, ${NOW} + INTERVAL ? MICROSECOND, ${NOW}, ${NOW} + INTERVAL ? MICROSECOND)
      ON DUPLICATE KEY UPDATE scope = scope`,
    /** scope, key: the claim's row, locked, with whether it may be taken over. */
    readClaim: `SELECT fingerprint, status, owner, expires_at <= ${NOW} AS expired,
        (locked_until IS NOT NULL AND locked_until <= ${NOW}) AS lapsed
      FROM ${t} WHERE scope = ? AND idempotency_key = ? FOR UPDATE`,
    /** fingerprint, owner, lease µs, retention µs, scope, key: takes the (locked) row over. */
    takeOver: `UPDATE ${t} SET fingerprint = ?, status = 'in_progress', owner = ?,
        locked_until = ${NOW} + INTERVAL ? MICROSECOND, response_status = NULL, response_headers = NULL,
        response_body = NULL, created_at = ${NOW}, expires_at = ${NOW} + INTERVAL ? MICROSECOND
      WHERE scope = ? AND idempotency_key = ?`,
    /** lease µs, scope, key, owner. */
    renew: `UPDATE ${t} SET locked_until = ${NOW} + INTERVAL ? MICROSECOND
      WHERE scope = ? AND idempotency_key = ? AND owner = ? AND status = 'in_progress'`,
    /** status, headers, body, retention µs, scope, key, owner. */
    complete: `UPDATE ${t} SET status = 'completed', locked_until = NULL, response_status = ?,
        response_headers = ?, response_body = ?, expires_at = ${NOW} + INTERVAL ? MICROSECOND
      WHERE scope = ? AND idempotency_key = ? AND owner = ? AND status = 'in_progress'`,
    /** scope, key, owner. */
    release: `DELETE FROM ${t} WHERE scope = ? AND idempotency_key = ? AND owner = ? AND status = 'in_progress'`,
    /** batch size: keys past retention, oldest first, locked, skipping rows others hold; never a live claim. */
    prunable: `SELECT scope, idempotency_key FROM ${t}
      WHERE expires_at <= ${NOW} AND NOT (status = 'in_progress' AND locked_until > ${NOW})
      ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`,
    /** (scope, key) × count: each row by its primary key (see queries.ts deleteByKeys for why). */
    deleteKeys: (count: number) => {
      const keys = Array.from({ length: count }, (_, i) =>
        i === 0 ? 'SELECT ? AS s, ? AS k' : 'SELECT ?, ?',
      ).join(' UNION ALL ');
      return `DELETE t FROM (${keys}) AS doomed STRAIGHT_JOIN ${t} AS t
        ON t.scope = doomed.s AND t.idempotency_key = doomed.k`;
    },
  };
}

interface KeyRow {
  fingerprint: Uint8Array | string;
  status: 'in_progress' | 'completed';
  live: number | string | boolean | null;
  response_status: number | null;
  response_headers: Uint8Array | string | null;
  response_body: Uint8Array | null;
}

function text(value: Uint8Array | string): string {
  return typeof value === 'string' ? value : Buffer.from(value).toString('utf8');
}

function toRecord(row: KeyRow): HttpKeyRecord {
  return {
    fingerprint: text(row.fingerprint),
    status: row.status,
    live: Number(row.live) === 1,
    responseStatus: row.response_status === null ? null : Number(row.response_status),
    responseHeaders: row.response_headers === null ? null : text(row.response_headers),
    responseBody: row.response_body,
  };
}

/** A refused scope or key, with the limit it broke (the request is answered 500 and logged). */
function checkKey(scope: string, key: string): void {
  for (const [what, value] of [
    ['scope', scope],
    ['key', key],
  ] as const) {
    if (Buffer.byteLength(value, 'utf8') > MAX_KEY_BYTES) {
      throw new RangeError(
        `MySqlStore keeps an HTTP idempotency ${what} of at most ${MAX_KEY_BYTES} bytes (UTF-8); got ${Buffer.byteLength(value, 'utf8')}`,
      );
    }
  }
}

/** The name of the key's session lock: at most 64 characters (MySQL's limit), so hashed. */
function lockName(schema: string, scope: string, key: string): string {
  const digest = createHash('sha256').update(`${schema}:${scope.length}:${scope}:${key}`).digest('base64url');
  return `oncely_http:${digest}`;
}

const micros = (ms: number) => Math.round(ms * 1000);

/**
 * `@oncely/http`'s keys on a MySqlStore. Transactional mode's per-key lock is
 * `GET_LOCK(name, 0)` (never waits: a held lock is "in progress"), held until the key's
 * transaction has committed or rolled back and released before its connection is pooled
 * again; a connection that breaks releases it with its session.
 */
export function createMySqlHttpKeys(options: {
  schema: string;
  quoted: string;
  migrate: () => Promise<string[]>;
  /** False when the store runs in the caller's own transactions. */
  ownsTransactions: boolean;
}): HttpKeyStore<SqlClient> {
  const { schema } = options;
  const q = buildHttpQueries(options.quoted);
  return {
    ...(options.ownsTransactions ? {} : { transactionalRefusal: CALLER_TRANSACTION_REFUSAL }),
    maxKeyBytes: MAX_KEY_BYTES,
    migrate: options.migrate,
    async tryLock(tx, scope, key) {
      checkKey(scope, key);
      const name = lockName(schema, scope, key);
      if (!(tx instanceof StoreConnection) || !tx.runAfterTransaction(q.releaseLock, [name])) {
        throw new Error(CALLER_TRANSACTION_REFUSAL);
      }
      // Queued before it is taken: a GET_LOCK whose answer is lost still gets released.
      const { rows } = await tx.query<{ locked: number | string | null }>(q.tryLock, [name]);
      const locked = Number(rows[0]?.locked) === 1;
      const row = (await tx.query<KeyRow>(q.peek, [scope, key])).rows[0];
      return { locked, record: row ? toRecord(row) : undefined };
    },
    async read(tx, scope, key) {
      checkKey(scope, key);
      const row = (await tx.query<KeyRow>(q.read, [scope, key])).rows[0];
      return row ? toRecord(row) : undefined;
    },
    async saveCompleted(tx, { scope, key, fingerprint, response, retentionMs }) {
      checkKey(scope, key);
      await tx.query(q.saveCompleted, [
        scope,
        key,
        fingerprint,
        response.status,
        response.headers,
        Buffer.from(response.body),
        micros(retentionMs),
      ]);
    },
    async acquire(tx, { scope, key, fingerprint, owner, leaseMs, retentionMs }) {
      checkKey(scope, key);
      // Inserts the claim, or (a row exists) changes nothing but takes the row's exclusive
      // lock. Not a plain INSERT: its duplicate error leaves a shared lock, and concurrent
      // requests for a new key then deadlock upgrading theirs (seen on MariaDB 10.11 with
      // 20 at once); exclusive waits queue instead.
      await tx.query(q.insertOrLockClaim, [
        scope,
        key,
        fingerprint,
        owner,
        micros(leaseMs),
        micros(retentionMs),
      ]);
      const row = (
        await tx.query<{
          fingerprint: Uint8Array | string;
          status: string;
          owner: string | null;
          expired: number | string;
          lapsed: number | string | null;
        }>(q.readClaim, [scope, key])
      ).rows[0];
      if (!row) return false; // cannot happen while we hold its lock; answered "in progress"
      if (row.owner === owner && row.status === 'in_progress') return true;
      const mayTakeOver =
        Number(row.expired) === 1 ||
        (row.status === 'in_progress' && Number(row.lapsed) === 1 && text(row.fingerprint) === fingerprint);
      if (!mayTakeOver) return false;
      await tx.query(q.takeOver, [fingerprint, owner, micros(leaseMs), micros(retentionMs), scope, key]);
      return true;
    },
    async renew(tx, { scope, key, owner, leaseMs }) {
      return (await tx.query(q.renew, [micros(leaseMs), scope, key, owner])).rowCount === 1;
    },
    async complete(tx, { scope, key, owner, response, retentionMs }) {
      const { rowCount } = await tx.query(q.complete, [
        response.status,
        response.headers,
        Buffer.from(response.body),
        micros(retentionMs),
        scope,
        key,
        owner,
      ]);
      return rowCount === 1;
    },
    async release(tx, { scope, key, owner }) {
      return (await tx.query(q.release, [scope, key, owner])).rowCount === 1;
    },
    async prune(tx, batchSize) {
      const { rows } = await tx.query<{ scope: Uint8Array; idempotency_key: Uint8Array }>(q.prunable, [
        batchSize,
      ]);
      if (rows.length === 0) return 0;
      await tx.query(
        q.deleteKeys(rows.length),
        rows.flatMap((row) => [Buffer.from(row.scope), Buffer.from(row.idempotency_key)]),
      );
      return rows.length;
    },
  };
}
