import type { Logger, SqlResult } from '@oncely/core';
import { ConfigError, StoreUnavailableError } from '@oncely/core';
import { classifyMySqlError, markFromStoreConnection } from '../classifyError.js';
import { DeadlineQueue } from './DeadlineQueue.js';
import type { HeldSessionLock, MySqlDriver, RawConnection } from './MySqlDriver.js';
import { describeError, redactUrl, toSqlResult } from './MySqlDriver.js';

/**
 * The part of a `mysql2/promise` pool connection the store uses. Declared structurally so
 * the store's types do not pin a mysql2 version in applications.
 *
 * @example
 * ```ts
 * const connection: MySqlPoolConnectionLike = await pool.getConnection();
 * ```
 */
export interface MySqlPoolConnectionLike {
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
  release(): void;
  destroy(): void;
  /** The callback connection underneath (mysql2 keeps the server's status flags there). */
  readonly connection?: {
    serverStatus?: number;
    on(event: 'error' | 'end', listener: (...args: any[]) => void): unknown;
    removeListener(event: 'error' | 'end', listener: (...args: any[]) => void): unknown;
  };
}

/**
 * A `mysql2/promise` pool (`mysql.createPool(...)` from `mysql2/promise`, or
 * `pool.promise()` of a callback pool).
 *
 * @example
 * ```ts
 * import mysql from 'mysql2/promise';
 * const pool: MySqlPoolLike = mysql.createPool({ uri: process.env.DATABASE_URL });
 * const store = new MySqlStore({ pool });
 * ```
 */
export interface MySqlPoolLike {
  getConnection(): Promise<MySqlPoolConnectionLike>;
  end(): Promise<void>;
}

/** Where the pool comes from: the caller's, or one we create (and close) from a URL. */
export type PoolSource =
  | { pool: MySqlPoolLike }
  | { url: string; poolMax: number; connectTimeoutMs: number; idleTimeoutMs: number };

/** Session settings and time bounds of the pool driver. */
export interface PoolSettings {
  /** `innodb_lock_wait_timeout` of the store's sessions, in whole seconds (MySQL's unit; at least 1). */
  lockWaitTimeoutSeconds: number;
  /** Longest wait for one statement's answer, in ms (0: none); past it the connection is destroyed. */
  queryTimeoutMs: number;
  /** Longest wait for a pooled connection, in ms; past it the store is unavailable. */
  poolWaitTimeoutMs: number;
}

/** SERVER_STATUS_IN_TRANS: the server reports an open transaction on this session. */
const SERVER_STATUS_IN_TRANS = 0x0001;

/** Stale-connection retries for a caller's pool, whose size we do not know. */
const DEFAULT_STALE_ATTEMPTS = 10;

/**
 * The store's sessions, once each: READ COMMITTED, so a claim that waited for another
 * transaction's marker re-reads the key and a locking read sees the latest commit (and no
 * gap locks: under REPEATABLE READ the marker index's gaps are locked and concurrent
 * duplicates deadlock each other, see the README); and a bounded lock wait.
 */
const sessionsSetUp = new WeakSet<object>();

/**
 * The pool driver: a mysql2 pool (the store's own from a URL, or yours). Every
 * transaction runs on one pooled connection: `START TRANSACTION`, the work, `COMMIT`. A
 * connection that fails, or a statement that outlives `queryTimeoutMs`, destroys the
 * connection and reports `StoreUnavailableError` (the original error as `cause`).
 */
export class PoolDriver implements MySqlDriver {
  private poolPromise: Promise<MySqlPoolLike> | undefined;
  /** The pool once {@link poolPromise} has resolved: a checkout then waits for nothing else. */
  private readyPool: MySqlPoolLike | undefined;
  private readonly ownsPool: boolean;
  private readonly staleConnectionAttempts: number;
  /** The bound of every checkout's wait for a pooled connection (poolWaitTimeoutMs). */
  private readonly poolWaits: DeadlineQueue;
  /** The bound of every statement's answer (queryTimeoutMs); none when 0. */
  private readonly statementWaits: DeadlineQueue | undefined;

  constructor(
    private readonly source: PoolSource,
    private readonly settings: PoolSettings,
    private readonly log: Logger,
  ) {
    this.ownsPool = !('pool' in source);
    this.staleConnectionAttempts = ('poolMax' in source ? source.poolMax : DEFAULT_STALE_ATTEMPTS) + 1;
    if ('pool' in source) {
      this.readyPool = source.pool;
      this.poolPromise = Promise.resolve(source.pool);
    }
    this.poolWaits = new DeadlineQueue(settings.poolWaitTimeoutMs);
    this.statementWaits =
      settings.queryTimeoutMs > 0 ? new DeadlineQueue(settings.queryTimeoutMs) : undefined;
  }

  async transaction<T>(_operation: string, work: (connection: RawConnection) => Promise<T>): Promise<T> {
    const session = await this.checkout('START TRANSACTION');
    let rollbackFailed = false;
    try {
      let result: T;
      try {
        result = await work(session);
      } catch (error) {
        if (session.lost === undefined) {
          await session.ownStatement('ROLLBACK').catch(() => {
            rollbackFailed = true;
          });
        }
        throw error;
      }
      await session.ownStatement('COMMIT');
      return result;
    } catch (error) {
      if (session.lost !== undefined) {
        // Also covers a COMMIT whose answer never arrived: its outcome is unknown, and the
        // retry after the outage finds the marker if it did commit.
        throw new StoreUnavailableError(
          `MySQL connection lost during a transaction: ${describeError(error)}`,
          {
            cause: error,
          },
        );
      }
      throw withCallerStack(error);
    } finally {
      // A session lock held past the commit (see runAfterTransaction) is released before the
      // connection is pooled; if that fails the connection is destroyed, which releases it.
      const releasedLocks = rollbackFailed
        ? false
        : !session.hasAfterEnd || (await session.afterTransaction());
      session.release(rollbackFailed || !releasedLocks);
    }
  }

  async statement<R = Record<string, unknown>>(
    text: string,
    params: readonly unknown[],
  ): Promise<SqlResult<R>> {
    const session = await this.checkout(text, params);
    session.release(false);
    return session.first as SqlResult<R>;
  }

  async session<T>(work: (connection: RawConnection) => Promise<T>): Promise<T> {
    const session = await this.checkout('DO 0');
    let suspect = false;
    try {
      return await work(session);
    } catch (error) {
      suspect = true;
      throw error;
    } finally {
      session.release(suspect);
    }
  }

  async sessionLock(name: string): Promise<HeldSessionLock | undefined> {
    const session = await this.checkout('SELECT GET_LOCK(?, 0) AS locked', [name]);
    if (Number(session.first.rows[0]?.locked) !== 1) {
      session.release(false);
      return undefined;
    }
    return {
      get lost() {
        return session.lost !== undefined;
      },
      // Destroyed, not RELEASE_LOCK'd and pooled: no round trip a dead server could hold up.
      release: async () => session.release(true),
    };
  }

  async ping(): Promise<void> {
    const session = await this.checkout('DO 0');
    session.release(false);
  }

  async close(): Promise<void> {
    if (!this.ownsPool || !this.poolPromise) return;
    const pool = await this.poolPromise.catch(() => undefined);
    await pool?.end();
  }

  /**
   * Checks a connection out and runs `first` on it. After a database restart the pool can
   * still hold idle connections whose death it has not noticed; one failing on its first
   * statement has done nothing, so it is destroyed and another is tried, up to once per
   * pooled connection plus one fresh one.
   */
  private async checkout(first: string, params?: readonly unknown[]): Promise<Session> {
    for (let attempt = 1; ; attempt++) {
      const connection = await this.connect();
      const session = new Session(connection, this.statementWaits);
      try {
        const key = connection.connection ?? connection;
        if (!sessionsSetUp.has(key)) await this.setUpSession(session, key);
        session.first = await session.ownStatement(first, params);
        return session;
      } catch (error) {
        // A statement that timed out is a partition, not a stale pooled connection:
        // trying every other connection would only multiply the wait.
        if (error instanceof StoreUnavailableError && session.lost === error) {
          session.release(true);
          throw error;
        }
        markFromStoreConnection(error);
        const dead = session.lost !== undefined || classifyMySqlError(error) === 'unavailable';
        session.release(true);
        if (!dead) throw withCallerStack(error);
        if (attempt >= this.staleConnectionAttempts) {
          throw new StoreUnavailableError(`MySQL does not answer: ${describeError(error)}`, { cause: error });
        }
      }
    }
  }

  private async setUpSession(session: Session, key: object): Promise<void> {
    await session.ownStatement('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
    await session.ownStatement(
      `SET SESSION innodb_lock_wait_timeout = ${this.settings.lockWaitTimeoutSeconds}`,
    );
    sessionsSetUp.add(key);
  }

  /** A pooled connection within `poolWaitTimeoutMs`; one promise once the pool exists. */
  private connect(): Promise<MySqlPoolConnectionLike> {
    const ready = this.readyPool;
    if (ready) return this.boundedGetConnection(ready);
    // Created on first use; a failure to create it (mysql2 missing) is thrown as it is.
    return this.pool().then((pool) => {
      this.readyPool = pool;
      return this.boundedGetConnection(pool);
    });
  }

  /**
   * `pool.getConnection()` within `poolWaitTimeoutMs`: mysql2 queues the request without
   * limit while every connection is in use. A connection that arrives after the wait gave
   * up is released at once, so the pool loses nothing. A failure to connect is reported as
   * `StoreUnavailableError` (the driver's error as `cause`).
   */
  private boundedGetConnection(pool: MySqlPoolLike): Promise<MySqlPoolConnectionLike> {
    const waits = this.poolWaits;
    return new Promise<MySqlPoolConnectionLike>((resolve, reject) => {
      let gaveUp = false;
      const deadline = waits.add(() => {
        gaveUp = true;
        reject(
          new StoreUnavailableError(
            `no MySQL connection free within ${waits.ms} ms (poolWaitTimeoutMs): the pool is exhausted or the server does not answer`,
          ),
        );
      });
      pool.getConnection().then(
        (connection) => {
          waits.remove(deadline);
          if (gaveUp) connection.release();
          else resolve(connection);
        },
        (error: unknown) => {
          waits.remove(deadline);
          if (!gaveUp) reject(this.connectError(error));
        },
      );
    });
  }

  private connectError(error: unknown): StoreUnavailableError {
    if (error instanceof StoreUnavailableError) return error;
    markFromStoreConnection(error);
    const at = 'url' in this.source ? ` at ${redactUrl(this.source.url)}` : '';
    return new StoreUnavailableError(`cannot connect to MySQL${at}: ${describeError(error)}`, {
      cause: error,
    });
  }

  private pool(): Promise<MySqlPoolLike> {
    this.poolPromise ??= this.createPool();
    return this.poolPromise;
  }

  private async createPool(): Promise<MySqlPoolLike> {
    if ('pool' in this.source) return this.source.pool;
    const { url, poolMax, connectTimeoutMs, idleTimeoutMs } = this.source;
    const mysql = await importMysql2();
    const pool = mysql.createPool({
      uri: url,
      connectionLimit: poolMax,
      maxIdle: poolMax,
      // Without it a connect to an unreachable host waits for the OS (minutes).
      connectTimeout: connectTimeoutMs,
      idleTimeout: idleTimeoutMs,
      enableKeepAlive: true,
      // The store writes UTC (UTC_TIMESTAMP); DATETIMEs read back are UTC too.
      timezone: 'Z',
      // BIGINTs beyond 2^53 (Kafka offsets, ids) as exact strings instead of rounded numbers.
      supportBigNumbers: true,
      bigNumberStrings: true,
    });
    // Idle connections that die (a server restart) emit 'error' on the pool's connection,
    // which the pool handles by discarding it; log it for the operator.
    (pool as unknown as { on?(event: string, listener: (...args: any[]) => void): void }).on?.(
      'connection',
      (connection: { on(event: 'error', listener: (error: unknown) => void): void }) => {
        connection.on('error', (error: unknown) =>
          this.log.warn('MySQL connection failed; the pool discards it', { error }),
        );
      },
    );
    return pool as unknown as MySqlPoolLike;
  }
}

/** A callback answer of mysql2: an error, or rows / a ResultSetHeader. */
type Answer = (error: unknown, result?: unknown) => void;

/**
 * The callback connection under a mysql2 promise connection (its `connection`), when it
 * has one: the `query()` its promise `query()` wraps, and its `trace` option. Not part of
 * {@link MySqlPoolConnectionLike}: mysql2's typings declare that property as a promise
 * connection.
 */
interface CallbackConnection {
  readonly config?: { trace?: boolean };
  query(sql: string, values: unknown, callback: Answer): unknown;
  query(sql: string, callback: Answer): unknown;
}

/**
 * One checked-out connection: its statements are bounded by the query timeout, and its
 * loss (an 'error' or 'end' of the socket, a timed-out statement) is remembered so the
 * connection is destroyed rather than pooled and the failure reported as an outage.
 *
 * Statements go to mysql2's callback connection (the one its promise `query()` wraps),
 * one promise each, when the connection's `query()` is mysql2's own (a wrapper's is
 * called instead: {@link queriesThroughMysql2}). A statement of the work ({@link query}:
 * the handler's) first captures its caller's stack when the pool's `trace` option is on
 * (mysql2's default), as mysql2's promise `query()` does, and its error carries those
 * frames. The store's own statements
 * ({@link ownStatement}: START TRANSACTION, the claim's INSERT, COMMIT, ROLLBACK, session
 * set-up) capture nothing: with three of them per transaction that capture, walking the
 * store's call chain, was the largest client-side cost of a processOnce (issue 31's bench).
 * Their errors get the caller's frames when they leave the checkout or the transaction
 * ({@link withCallerStack}); only a caller of `store.claim()` that catches the error
 * inside its own transaction sees mysql2's frames instead.
 */
class Session implements RawConnection {
  /** The first loss seen on the connection, if any. */
  lost: unknown;
  /** The answer of the checkout's first statement. */
  first: SqlResult<any> = { rows: [], rowCount: 0 };
  private released = false;
  private readonly core: MySqlPoolConnectionLike['connection'];
  /** The callback connection statements are sent on; undefined: the promise `query()`. */
  private readonly callbacks: CallbackConnection | undefined;
  /** Whether a statement of the work captures its caller's stack (mysql2's `trace`). */
  private readonly trace: boolean;
  private readonly onError = (error: unknown) => {
    this.lost ??= error ?? new Error('connection error');
  };
  private readonly onEnd = () => {
    this.lost ??= new Error('connection ended');
  };

  constructor(
    private readonly connection: MySqlPoolConnectionLike,
    /** The driver's shared statement bound (queryTimeoutMs); undefined when there is none. */
    private readonly statementWaits: DeadlineQueue | undefined,
  ) {
    const core = connection.connection;
    this.core = core;
    const callbacks = core as Partial<CallbackConnection> | undefined;
    this.callbacks =
      typeof callbacks?.query === 'function' && queriesThroughMysql2(connection)
        ? (callbacks as CallbackConnection)
        : undefined;
    this.trace = callbacks?.config?.trace === true;
    core?.on('error', this.onError);
    core?.on('end', this.onEnd);
  }

  /** Statements to run once the transaction has ended; see {@link RawConnection.runAfterTransaction}. */
  private readonly afterEnd: Array<{ text: string; params: readonly unknown[] }> = [];

  /** Whether {@link runAfterTransaction} queued anything. */
  get hasAfterEnd(): boolean {
    return this.afterEnd.length > 0;
  }

  runAfterTransaction(text: string, params: readonly unknown[]): void {
    this.afterEnd.push({ text, params });
  }

  /** Runs what {@link runAfterTransaction} queued; false when one failed (destroy the connection). */
  async afterTransaction(): Promise<boolean> {
    if (this.afterEnd.length === 0) return true;
    if (this.lost !== undefined) return false;
    try {
      for (const { text, params } of this.afterEnd.splice(0)) await this.ownStatement(text, params);
      return true;
    } catch {
      return false;
    }
  }

  inTransaction(): boolean | undefined {
    const status = this.core?.serverStatus;
    return typeof status === 'number' ? (status & SERVER_STATUS_IN_TRANS) !== 0 : undefined;
  }

  /** A statement of the work: its error carries the caller's frames (with `trace`). */
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    if (!this.callbacks) return this.viaPromise<R>(text, params);
    const caller = this.trace ? captureStack(Session.prototype.query) : undefined;
    return this.send<R>(this.callbacks, text, params, caller);
  }

  /** A statement of the store's own: no stack captured (see the class). */
  ownStatement<R = Record<string, unknown>>(
    text: string,
    params?: readonly unknown[],
  ): Promise<SqlResult<R>> {
    if (!this.callbacks) return this.viaPromise<R>(text, params);
    return this.send<R>(this.callbacks, text, params, undefined);
  }

  /** One statement on the callback connection, bounded by queryTimeoutMs: one promise. */
  private send<R>(
    callbacks: CallbackConnection,
    text: string,
    params: readonly unknown[] | undefined,
    caller: { stack?: string } | undefined,
  ): Promise<SqlResult<R>> {
    if (this.lost !== undefined) return Promise.reject(unavailable(this.lost));
    return new Promise<SqlResult<R>>((resolve, reject) => {
      const waits = this.statementWaits;
      const deadline = waits?.add(() => reject(this.timedOut(waits.ms)));
      const answer: Answer = (error, result) => {
        if (deadline) waits!.remove(deadline);
        if (!error) {
          resolve(toSqlResult<R>(result));
          return;
        }
        this.failed(error);
        if (caller) applyStack(error, caller);
        else if (typeof error === 'object') uncaptured.add(error as object);
        reject(error);
      };
      try {
        if (params === undefined) callbacks.query(text, answer);
        else callbacks.query(text, params, answer);
      } catch (error) {
        answer(error);
      }
    });
  }

  /**
   * The promise `query()` of a connection-like without a callback connection underneath
   * (mysql2's own promise connections always have one): bounded the same way.
   */
  private viaPromise<R>(text: string, params: readonly unknown[] | undefined): Promise<SqlResult<R>> {
    if (this.lost !== undefined) return Promise.reject(unavailable(this.lost));
    const sent = params === undefined ? this.connection.query(text) : this.connection.query(text, params);
    const answer = sent.then(
      ([result]) => toSqlResult<R>(result),
      (error: unknown) => {
        this.failed(error);
        throw error;
      },
    );
    const waits = this.statementWaits;
    if (!waits) return answer;
    return new Promise<SqlResult<R>>((resolve, reject) => {
      const deadline = waits.add(() => reject(this.timedOut(waits.ms)));
      answer.then(
        (value) => {
          waits.remove(deadline);
          resolve(value);
        },
        (error: unknown) => {
          waits.remove(deadline);
          reject(error);
        },
      );
    });
  }

  /** A statement failed: a fatal error (the connection is dead) makes the session lost. */
  private failed(error: unknown): void {
    markFromStoreConnection(error);
    if ((error as { fatal?: unknown } | null)?.fatal === true) this.lost ??= error;
  }

  /** A statement outlived queryTimeoutMs: the connection is destroyed. */
  private timedOut(ms: number): StoreUnavailableError {
    const error = new StoreUnavailableError(
      `MySQL did not answer within ${ms} ms (queryTimeoutMs): connection destroyed`,
    );
    this.lost ??= error;
    this.release(true);
    return error;
  }

  /** Gives the connection back; a lost or suspect one is destroyed instead of pooled. */
  release(suspect: boolean): void {
    if (this.released) return;
    this.released = true;
    this.core?.removeListener('end', this.onEnd);
    if (this.lost !== undefined || suspect) {
      // Keep the error listener: a destroyed socket may still report its last error.
      this.connection.destroy();
      return;
    }
    this.core?.removeListener('error', this.onError);
    this.connection.release();
  }
}

/**
 * Whether `connection.query` is mysql2's own promise `query()` (inherited from its
 * PromiseConnection, as on every connection of a mysql2 promise pool, or through a
 * transparent Proxy of one): only then is sending on the callback connection underneath
 * the same as calling it. A wrapper's own `query()` (logging, tracing, fault injection) is
 * what the store must call, and its `connection` may be anything (mysql2's typings call it
 * a promise connection): such a connection keeps the promise path.
 */
function queriesThroughMysql2(connection: MySqlPoolConnectionLike): boolean {
  if (Object.hasOwn(connection, 'query')) return false;
  let proto: unknown = Object.getPrototypeOf(connection);
  while (proto !== null && typeof proto === 'object' && !Object.hasOwn(proto, 'query')) {
    proto = Object.getPrototypeOf(proto);
  }
  const owner = proto as { constructor?: { name?: unknown }; query?: unknown } | null;
  return owner?.constructor?.name === 'PromiseConnection' && owner.query === connection.query;
}

/**
 * Errors of the store's own statements, sent without capturing a stack: they get the
 * caller's frames from {@link withCallerStack} on their way out.
 */
const uncaptured = new WeakSet<object>();

/** The stack where it is called, frames above `below` left out (mysql2's captureStackHolder). */
function captureStack(below: (...args: any[]) => unknown): { stack?: string } {
  const holder: { stack?: string } = {};
  Error.captureStackTrace(holder, below);
  return holder;
}

/** `error`'s first line (name and message) over the frames of `holder` (mysql2's applyCapturedStack). */
function applyStack(error: unknown, holder: { stack?: string }): void {
  const stack = holder.stack;
  if (!(error instanceof Error) || typeof stack !== 'string' || !stack) return;
  const lines = stack.split('\n');
  lines[0] = `${error.name}: ${error.message}`;
  error.stack = lines.join('\n');
}

/**
 * An error of one of the store's own statements, leaving the checkout or the transaction,
 * gets the frames of that place and its async callers (the code that called processOnce
 * or the store method): what mysql2's `trace` would have given it, captured only on
 * failure. Any other error is returned as it is.
 */
function withCallerStack(error: unknown): unknown {
  if (typeof error !== 'object' || error === null || !uncaptured.has(error)) return error;
  uncaptured.delete(error);
  applyStack(error, captureStack(withCallerStack));
  return error;
}

function unavailable(cause: unknown): StoreUnavailableError {
  return cause instanceof StoreUnavailableError
    ? cause
    : new StoreUnavailableError(`MySQL connection lost: ${describeError(cause)}`, { cause });
}

interface Mysql2Module {
  createPool(config: Record<string, unknown>): unknown;
}

async function importMysql2(): Promise<Mysql2Module> {
  const mod = (await import('mysql2/promise')) as unknown as {
    default?: Mysql2Module;
  } & Partial<Mysql2Module>;
  const createPool = mod.default?.createPool ?? mod.createPool;
  if (!createPool) throw new ConfigError('store', 'mysql2/promise has no createPool(): is mysql2 installed?');
  return { createPool };
}
