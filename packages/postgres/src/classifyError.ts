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
 * Set (non-enumerable) on every error a store connection's own statement raised (see
 * {@link markFromStoreConnection}). Only such errors, and the store's own
 * `StoreUnavailableError` / `SchemaVersionError`, may declare the store unavailable: a
 * socket error code on anything else came from something the handler called (an HTTP API
 * refusing connections), and treating it as a store outage would pause the consumer and
 * re-run the handler without ever counting an attempt.
 */
const FROM_STORE_CONNECTION = Symbol.for('oncely.postgres.fromStoreConnection');

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
  return classifyChain(error, 0, new Set());
}

/**
 * The store's own classification: like {@link classifyPostgresError}, except that
 * `'unavailable'` needs evidence that the store's connection failed — the error (or one
 * in its `cause` chain) was raised by a store connection's statement, or is the store's
 * `StoreUnavailableError` / `SchemaVersionError`. Anything else that looks like an outage
 * (a handler's HTTP call refused, a handler's own second database) is `'other'`: a
 * handler failure, counted and retried with backoff.
 */
export function classifyStoreError(error: unknown): StoreErrorKind {
  const kind = classifyPostgresError(error);
  if (kind !== 'unavailable') return kind;
  return raisedByStore(error, 0, new Set()) ? 'unavailable' : 'other';
}

function raisedByStore(error: unknown, depth: number, seen: Set<unknown>): boolean {
  if (typeof error !== 'object' || error === null || depth > MAX_DEPTH || seen.has(error)) return false;
  seen.add(error);
  if (FROM_STORE_CONNECTION in error) return true;
  if (isOncelyError(error, 'STORE_UNAVAILABLE') || isSchemaVersionError(error)) return true;
  const nested = (error as { errors?: unknown }).errors;
  if (Array.isArray(nested) && nested.some((inner) => raisedByStore(inner, depth + 1, seen))) return true;
  return raisedByStore((error as { cause?: unknown }).cause, depth + 1, seen);
}

function classifyChain(error: unknown, depth: number, seen: Set<unknown>): StoreErrorKind {
  if (typeof error !== 'object' || error === null || depth > MAX_DEPTH || seen.has(error)) return 'other';
  seen.add(error);
  if (isOncelyError(error, 'STORE_UNAVAILABLE') || isSchemaVersionError(error)) return 'unavailable';
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (TRANSIENT_SQLSTATES.has(code)) return 'transient';
    if (UNAVAILABLE_SQLSTATES.has(code)) return 'unavailable';
    if (UNAVAILABLE_SOCKET_CODES.has(code)) return 'unavailable';
    if (code.length === 5 && code.startsWith('08')) return 'unavailable';
  }
  // Node reports a refused dual-stack connect (::1 and 127.0.0.1) as an AggregateError.
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
 * Records that `error` was raised by one of the store's own connections (see
 * {@link FROM_STORE_CONNECTION}). Errors that cannot carry a property are left alone.
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
