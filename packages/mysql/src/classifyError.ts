import type { StoreErrorKind } from '@oncely/core';
import { isOncelyError } from '@oncely/core';
import { isMySqlSchemaVersionError } from './errors.js';

/**
 * Server error numbers of a transaction that lost a race and can simply run again,
 * retried without counting an attempt: 1213 ER_LOCK_DEADLOCK (InnoDB rolled the whole
 * transaction back), 1205 ER_LOCK_WAIT_TIMEOUT (`innodb_lock_wait_timeout`), 3572
 * ER_LOCK_NOWAIT (MySQL 8 `NOWAIT`), 1614 ER_XA_RBDEADLOCK. SQLSTATE 40001 (serialization
 * failure) is matched as well, whatever the number.
 */
const TRANSIENT_ERRNOS = new Set([1213, 1205, 3572, 1614]);

/**
 * Server error numbers meaning the server cannot serve us right now: 1040 too many
 * connections, 1053 server shutdown in progress, 1927 connection killed (MariaDB), 4031
 * disconnected for inactivity (MySQL 8), 1290 / 1836 running read-only (a failover:
 * writes go to a replica until the client reaches the new primary). SQLSTATE class 08
 * (connection exception) is matched by prefix.
 */
const UNAVAILABLE_ERRNOS = new Set([1040, 1053, 1927, 4031, 1290, 1836]);

/**
 * Codes mysql2 and Node put on connection-level failures: the socket's own errors and
 * the driver's protocol ones (a connection lost mid-statement, a handshake that never
 * answered, a pool that cannot connect).
 */
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNABORTED',
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'PROTOCOL_PACKETS_OUT_OF_ORDER',
  'ER_SERVER_SHUTDOWN',
  'ER_CON_COUNT_ERROR',
]);

/**
 * Set (non-enumerable) on every error one of the store's own connections raised (see
 * {@link markFromStoreConnection}). Only those, and the store's own unavailable and
 * schema-version errors, may declare the store unavailable: a socket error from anything
 * else came from something the handler called (an HTTP API refusing connections).
 */
const FROM_STORE_CONNECTION = Symbol.for('oncely.mysql.fromStoreConnection');

/** How deep `cause` chains and AggregateErrors are followed. */
const MAX_DEPTH = 6;

/**
 * Classifies an error by MySQL error number, SQLSTATE or socket / driver code — never by
 * message text.
 *
 * - `'transient'`: errno 1213 (deadlock), 1205 (lock wait timeout), 3572 (NOWAIT), 1614,
 *   or SQLSTATE 40001. Retry the transaction at once; no attempt is counted.
 * - `'unavailable'`: errno 1040, 1053, 1927, 4031, 1290, 1836; SQLSTATE class 08; the
 *   socket codes (ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, ...); mysql2's
 *   `PROTOCOL_CONNECTION_LOST`, `PROTOCOL_SEQUENCE_TIMEOUT`; any mysql2 error marked
 *   `fatal` (the connection is dead); core's `StoreUnavailableError`; and
 *   {@link MySqlSchemaVersionError} (fail closed until the schema is migrated).
 * - `'other'`: everything else, including constraint violations raised by handler SQL.
 *
 * `cause` chains and `AggregateError`s are followed, outermost first.
 *
 * @example
 * ```ts
 * if (classifyMySqlError(error) === 'transient') {
 *   // run the transaction again
 * }
 * ```
 */
export function classifyMySqlError(error: unknown): StoreErrorKind {
  return classifyChain(error, 0, new Set());
}

/**
 * The store's own classification: like {@link classifyMySqlError}, except that
 * `'unavailable'` needs evidence that the store's connection failed (the error, or one
 * in its `cause` chain, came from a store connection, or is the store's
 * `StoreUnavailableError` / {@link MySqlSchemaVersionError}). Anything else that looks
 * like an outage is `'other'`: a handler failure, counted and retried with backoff.
 *
 * @example
 * ```ts
 * classifyMySqlStoreError(new Error('connect ECONNREFUSED')); // 'other': not the store's connection
 * ```
 */
export function classifyMySqlStoreError(error: unknown): StoreErrorKind {
  const kind = classifyMySqlError(error);
  if (kind !== 'unavailable') return kind;
  return raisedByStore(error, 0, new Set()) ? 'unavailable' : 'other';
}

function raisedByStore(error: unknown, depth: number, seen: Set<unknown>): boolean {
  if (typeof error !== 'object' || error === null || depth > MAX_DEPTH || seen.has(error)) return false;
  seen.add(error);
  if (FROM_STORE_CONNECTION in error) return true;
  if (isOncelyError(error, 'STORE_UNAVAILABLE') || isMySqlSchemaVersionError(error)) return true;
  const nested = (error as { errors?: unknown }).errors;
  if (Array.isArray(nested) && nested.some((inner) => raisedByStore(inner, depth + 1, seen))) return true;
  return raisedByStore((error as { cause?: unknown }).cause, depth + 1, seen);
}

function classifyChain(error: unknown, depth: number, seen: Set<unknown>): StoreErrorKind {
  if (typeof error !== 'object' || error === null || depth > MAX_DEPTH || seen.has(error)) return 'other';
  seen.add(error);
  if (isOncelyError(error, 'STORE_UNAVAILABLE') || isMySqlSchemaVersionError(error)) return 'unavailable';
  const { errno, sqlState, code, fatal } = error as {
    errno?: unknown;
    sqlState?: unknown;
    code?: unknown;
    fatal?: unknown;
  };
  if (typeof errno === 'number') {
    if (TRANSIENT_ERRNOS.has(errno)) return 'transient';
    if (UNAVAILABLE_ERRNOS.has(errno)) return 'unavailable';
  }
  if (typeof sqlState === 'string') {
    if (sqlState === '40001') return 'transient';
    if (sqlState.startsWith('08')) return 'unavailable';
  }
  if (typeof code === 'string' && UNAVAILABLE_CODES.has(code)) return 'unavailable';
  // mysql2 marks errors after which the connection is unusable.
  if (fatal === true) return 'unavailable';
  const nested = (error as { errors?: unknown }).errors;
  if (Array.isArray(nested)) {
    for (const inner of nested) {
      const kind = classifyChain(inner, depth + 1, seen);
      if (kind !== 'other') return kind;
    }
  }
  return classifyChain((error as { cause?: unknown }).cause, depth + 1, seen);
}

/**
 * Records that `error` was raised by one of the store's own connections. Errors that
 * cannot carry a property are left alone.
 */
export function markFromStoreConnection(error: unknown): void {
  if (typeof error !== 'object' || error === null || FROM_STORE_CONNECTION in error) return;
  try {
    Object.defineProperty(error, FROM_STORE_CONNECTION, {
      value: true,
      enumerable: false,
      configurable: true,
    });
  } catch {
    // A frozen error keeps the plain classification, so it can only count as 'other'.
  }
}

/** The server's error number of `error`, if it has one. */
export function errnoOf(error: unknown): number | undefined {
  const errno = (error as { errno?: unknown } | null | undefined)?.errno;
  return typeof errno === 'number' ? errno : undefined;
}

/** ER_DUP_ENTRY: the unique key already holds this value (committed, or committed while we waited). */
export const ER_DUP_ENTRY = 1062;
