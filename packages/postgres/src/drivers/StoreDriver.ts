import type { SqlClient, SqlResult } from '@oncely/core';

/**
 * How the store reaches PostgreSQL: a `pg` pool, PGlite, or the caller's own
 * transactions. The SQL is the same for all three; only transaction handling differs.
 */
export interface StoreDriver {
  /**
   * Runs `work` in one transaction (READ COMMITTED where the driver controls it):
   * commits when it resolves, rolls back when it throws.
   *
   * @param operation the public method being served, for error messages
   * @param lockTimeoutMs applied with `SET LOCAL lock_timeout`; undefined leaves the server's setting
   */
  transaction<T>(
    operation: string,
    work: (client: SqlClient) => Promise<T>,
    lockTimeoutMs: number | undefined,
  ): Promise<T>;
  /**
   * Runs one statement on its own, committed by the server (autocommit): one round trip
   * instead of three. Absent where every statement must go through `transaction`.
   */
  statement?<R = Record<string, unknown>>(text: string, params: readonly unknown[]): Promise<SqlResult<R>>;
  /**
   * Subscribes to `channel` notifications on a connection of its own (`LISTEN`);
   * resolves with the unsubscribe function. `onLost` is called once if the connection
   * dies (subscribe again later). Absent where the driver cannot listen (caller
   * transactions): callers poll instead.
   */
  listen?(
    channel: string,
    onNotify: (payload: string) => void,
    onLost: (error: unknown) => void,
  ): Promise<() => Promise<void>>;
  /**
   * Takes the session-level advisory lock `(classId, hashtext(key))` without waiting, on a
   * connection of its own held until `release()`; undefined when another session holds it.
   * The lock ends with its connection, so a killed process lets go of it at once; `lost`
   * turns true when that connection dies. Absent where the driver cannot hold a connection
   * (caller transactions).
   */
  sessionLock?(classId: number, key: string): Promise<HeldSessionLock | undefined>;
  /** One cheap round trip; rejects with `StoreUnavailableError` when the database does not answer. */
  ping(): Promise<void>;
  /** Releases what the driver owns (a pool it created, a PGlite it started). */
  close(): Promise<void>;
}

/** A lock held by {@link StoreDriver.sessionLock}. */
export interface HeldSessionLock {
  /** Its connection died: the lock is gone. */
  readonly lost: boolean;
  /** Ends the lock (and its connection); never throws. */
  release(): Promise<void>;
}

/** The statement that opens a store transaction; lock timeouts are validated integers. */
export function lockTimeoutStatement(lockTimeoutMs: number): string {
  return `SET LOCAL lock_timeout = ${Math.trunc(lockTimeoutMs)}`;
}

/** A short description of an error for messages that wrap it (the error itself stays the cause). */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' ? `${error.message} (${code})` : error.message || error.name;
  }
  return String(error);
}

/**
 * A connection string fit for an error message: the password replaced by `***` (in a URL
 * and in a `password=` keyword), everything else kept so the reader sees which host,
 * port and database were tried.
 *
 * @example
 * ```ts
 * redactConnectionString('postgres://app:s3cret@db:5432/orders'); // 'postgres://app:***@db:5432/orders'
 * ```
 */
export function redactConnectionString(connectionString: string): string {
  const keywordsRedacted = connectionString.replace(/(password\s*=\s*)('[^']*'|[^\s&]*)/gi, '$1***');
  try {
    const url = new URL(keywordsRedacted);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return keywordsRedacted;
  }
}
