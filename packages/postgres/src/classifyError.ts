import type { StoreErrorKind } from '@oncely/core';
import { isOncelyError } from '@oncely/core';
import { isSchemaVersionError } from './errors.js';

/**
 * Serialization failure, deadlock, lock timeout: the transaction lost a race and can
 * simply run again. Retried without counting an attempt.
 */
const TRANSIENT_SQLSTATES = new Set(['40001', '40P01', '55P03']);

/**
 * The server cannot serve us right now: admin shutdown or a terminated backend (57P01),
 * crash shutdown (57P02), still starting (57P03), too many connections (53300). Class 08
 * (connection exception) is matched by prefix.
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);

/** Node socket and DNS errors: the database host cannot be reached. */
const UNAVAILABLE_SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNABORTED',
]);

/**
 * Set (non-enumerable) on an error that escaped a transaction while the store's own
 * connection was still healthy. A socket error code on such an error came from something
 * else the handler called (an HTTP API refusing connections), not from the database:
 * treating it as a store outage would pause the consumer and retry the handler forever.
 * SQLSTATEs still count: a terminated backend reports 57P01 before its socket closes.
 */
const STORE_CONNECTION_HEALTHY = Symbol.for('oncely.postgres.storeConnectionHealthy');

/** How deep `cause` chains and AggregateErrors are followed. */
const MAX_DEPTH = 6;

/**
 * Classifies an error by SQLSTATE or socket error code — never by message text.
 *
 * - `'transient'`: 40001 serialization failure, 40P01 deadlock, 55P03 lock not available
 *   (`lock_timeout`). Retry the transaction at once; no attempt is counted.
 * - `'unavailable'`: SQLSTATE class 08, 57P01, 57P02, 57P03, 53300; the socket codes
 *   ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, ENOTFOUND,
 *   EAI_AGAIN, ECONNABORTED; core's `StoreUnavailableError` (which the store throws
 *   when it cannot connect or its connection died — pg reports some of those as plain
 *   `Error`s without a code, so the store watches the client's `error`/`end` events
 *   instead of reading messages); and {@link SchemaVersionError} (fail closed until the
 *   schema is migrated).
 * - `'other'`: everything else, including constraint violations raised by handler SQL.
 *
 * `cause` chains and `AggregateError`s are followed, outermost first, so a handler that
 * wraps a deadlock in its own error is still retried.
 *
 * @example
 * ```ts
 * try {
 *   await store.transaction((tx) => tx.query('UPDATE accounts SET balance = balance - 1 WHERE id = 1'));
 * } catch (error) {
 *   if (classifyPostgresError(error) === 'transient') {
 *     // run the transaction again
 *   }
 * }
 * ```
 */
export function classifyPostgresError(error: unknown): StoreErrorKind {
  return classifyChain(error, 0, new Set(), !isHealthyConnectionError(error));
}

function classifyChain(
  error: unknown,
  depth: number,
  seen: Set<unknown>,
  socketCodes: boolean,
): StoreErrorKind {
  if (typeof error !== 'object' || error === null || depth > MAX_DEPTH || seen.has(error)) return 'other';
  seen.add(error);
  if (isOncelyError(error, 'STORE_UNAVAILABLE') || isSchemaVersionError(error)) return 'unavailable';
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (TRANSIENT_SQLSTATES.has(code)) return 'transient';
    if (UNAVAILABLE_SQLSTATES.has(code)) return 'unavailable';
    if (socketCodes && UNAVAILABLE_SOCKET_CODES.has(code)) return 'unavailable';
    if (code.length === 5 && code.startsWith('08')) return 'unavailable';
  }
  // Node reports a refused dual-stack connect (::1 and 127.0.0.1) as an AggregateError.
  const nested = (error as { errors?: unknown }).errors;
  if (Array.isArray(nested)) {
    for (const inner of nested) {
      const kind = classifyChain(inner, depth + 1, seen, socketCodes);
      if (kind !== 'other') return kind;
    }
  }
  return classifyChain((error as { cause?: unknown }).cause, depth + 1, seen, socketCodes);
}

/**
 * Records that `error` escaped a transaction whose connection was still healthy (see
 * {@link STORE_CONNECTION_HEALTHY}). Errors that cannot carry a property are left alone.
 */
export function markStoreConnectionHealthy(error: unknown): void {
  if (typeof error !== 'object' || error === null) return;
  if (isOncelyError(error, 'STORE_UNAVAILABLE')) return;
  try {
    Object.defineProperty(error, STORE_CONNECTION_HEALTHY, {
      value: true,
      enumerable: false,
      configurable: true,
    });
  } catch {
    // Frozen error objects keep their plain classification.
  }
}

function isHealthyConnectionError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && STORE_CONNECTION_HEALTHY in error;
}
