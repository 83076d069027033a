import type { SqlResult } from '@oncely/core';

/**
 * One connection inside a store transaction, as the store sees it: `?`-placeholder SQL
 * and whether the server still reports an open transaction.
 */
export interface RawConnection {
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>>;
  /**
   * A statement of the store's own (a claim's marker INSERT): as {@link query}, without
   * capturing the caller's stack first (mysql2's `trace`). An error of it carries the
   * caller's frames only once the driver's transaction has let it out. Absent: `query`.
   */
  ownStatement?<R = Record<string, unknown>>(text: string, params: readonly unknown[]): Promise<SqlResult<R>>;
  /**
   * Whether the server reported an open transaction after the last statement (the
   * SERVER_STATUS_IN_TRANS flag of its answer); undefined where the driver cannot tell
   * (a caller's own transaction client).
   */
  inTransaction(): boolean | undefined;
  /**
   * Runs `text` on this connection once its transaction has ended (committed or rolled
   * back), before the connection is pooled again: releasing a session-scoped `GET_LOCK`
   * that must outlive the commit. Absent where the store does not end the transaction
   * itself (a caller's own transaction).
   */
  runAfterTransaction?(text: string, params: readonly unknown[]): void;
}

/**
 * How the store reaches MySQL: a mysql2 pool (the store's own, or yours) or your own
 * transactions. The SQL is the same; only transaction handling differs.
 */
export interface MySqlDriver {
  /** Runs `work` in one transaction: commits when it resolves, rolls back when it throws. */
  transaction<T>(operation: string, work: (connection: RawConnection) => Promise<T>): Promise<T>;
  /** One statement on its own, committed by the server (autocommit): one round trip. */
  statement?<R = Record<string, unknown>>(text: string, params: readonly unknown[]): Promise<SqlResult<R>>;
  /**
   * Runs `work` on one connection outside any transaction (migrations: `GET_LOCK` is a
   * session lock, and DDL commits on its own in MySQL).
   */
  session<T>(work: (connection: RawConnection) => Promise<T>): Promise<T>;
  /**
   * Takes `GET_LOCK(name, 0)` on a connection of its own held until `release()` (which
   * destroys it, ending the lock); undefined when another session holds it. The lock ends
   * with its connection, so a killed process lets go of it at once. Absent where the
   * driver cannot hold a connection (caller transactions).
   */
  sessionLock?(name: string): Promise<HeldSessionLock | undefined>;
  /** One cheap round trip; rejects with `StoreUnavailableError` when the database does not answer. */
  ping(): Promise<void>;
  /** Releases what the driver owns (a pool it created). */
  close(): Promise<void>;
}

/** A lock held by {@link MySqlDriver.sessionLock}. */
export interface HeldSessionLock {
  /** Its connection died: the lock is gone. */
  readonly lost: boolean;
  /** Ends the lock and its connection; never throws. */
  release(): Promise<void>;
}

/** A mysql2 answer (rows of a SELECT, or a ResultSetHeader) as core's SqlResult. */
export function toSqlResult<R>(answer: unknown): SqlResult<R> {
  if (Array.isArray(answer)) return { rows: answer as R[], rowCount: answer.length };
  const header = answer as { affectedRows?: number; insertId?: number } | undefined;
  const result: SqlResult<R> & { insertId?: number } = {
    rows: [],
    rowCount: typeof header?.affectedRows === 'number' ? header.affectedRows : null,
  };
  // insertId is read by recordAttempt (LAST_INSERT_ID(expr)); not part of SqlResult.
  if (header && typeof header.insertId === 'number') result.insertId = header.insertId;
  return result;
}

/** A short description of an error for messages that wrap it (the error itself stays the cause). */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const { code, errno } = error as { code?: unknown; errno?: unknown };
    const tag = typeof code === 'string' ? code : typeof errno === 'number' ? `errno ${errno}` : undefined;
    return tag ? `${error.message || error.name} (${tag})` : error.message || error.name;
  }
  return String(error);
}

/**
 * A connection URL fit for an error message: the password replaced by `***`.
 *
 * @example
 * ```ts
 * redactUrl('mysql://app:s3cret@db:3306/orders'); // 'mysql://app:***@db:3306/orders'
 * ```
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url.replace(/(\/\/[^/:@\s]*):[^@\s/]*@/g, '$1:***@');
  }
}
