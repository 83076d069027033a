import type { Logger, SqlClient, SqlResult } from '@oncely/core';
import { StoreUnavailableError } from '@oncely/core';
import { classifyPostgresError, markFromStoreConnection } from '../classifyError.js';
import { DriverNotInstalledError, TransactionAbortedError } from '../errors.js';
import { inlineLiterals } from './inlineLiterals.js';
import type { HeldSessionLock, StoreDriver } from './StoreDriver.js';
import { describeError, lockTimeoutStatement, redactConnectionString } from './StoreDriver.js';

/**
 * The part of a `pg.PoolClient` the store uses. Declared structurally so that the
 * store's types do not require `@types/pg` in applications.
 *
 * @example
 * ```ts
 * const client: PgPoolClientLike = await pool.connect();
 * ```
 */
export interface PgPoolClientLike extends SqlClient {
  release(destroy?: Error | boolean): void;
  on(event: 'error' | 'end', listener: (...args: any[]) => void): unknown;
  removeListener(event: 'error' | 'end', listener: (...args: any[]) => void): unknown;
}

/**
 * The part of a `pg.Pool` the store uses; a real `pg.Pool` fits it.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * const pool: PgPoolLike = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const store = new PostgresStore({ pool });
 * ```
 */
export interface PgPoolLike {
  connect(): Promise<PgPoolClientLike>;
  on(event: 'error', listener: (error: Error) => void): unknown;
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
  end(): Promise<void>;
}

/** Where the pool comes from: the caller's, or one we create (and close) from a connection string. */
export type PgPoolSource =
  | { pool: PgPoolLike }
  | { connectionString: string; poolMax: number; connectTimeoutMs: number };

/**
 * Time bounds of the `pg` driver. A silent network partition (no RST, no FIN) leaves a
 * socket waiting forever; without a bound of our own a delivery would be held, its lease
 * renewed, and `stop()` could never finish.
 */
export interface PgTimeouts {
  /**
   * Longest wait for any one statement's answer, in ms (0: none). Past it the connection
   * is discarded and the call fails with `StoreUnavailableError`, so a partitioned
   * database becomes a store outage (pause, hold, release) in bounded time.
   */
  queryTimeoutMs: number;
  /**
   * `SET LOCAL idle_in_transaction_session_timeout` for store transactions, in ms (0: the
   * server's setting). If the client vanishes mid-transaction, the server ends the session
   * after this long and frees the marker rows it locked, so other consumers' claims do not
   * wait on a ghost.
   */
  idleInTransactionTimeoutMs: number;
}

/** Stale-connection retries for a caller's pool, whose size we do not know. */
const DEFAULT_STALE_ATTEMPTS = 10;

/**
 * The `pg` driver. Connection failures are reported as core's `StoreUnavailableError`:
 * pg raises some of them as plain `Error`s with no code ("Connection terminated
 * unexpectedly", "timeout exceeded when trying to connect"), and errors are never
 * classified by message text. A failed `pool.connect()` is therefore wrapped, and a
 * transaction whose client emitted `error` or `end` (the socket died) is reported as
 * unavailable, with the original error as `cause`.
 */
export class PgDriver implements StoreDriver {
  private poolPromise: Promise<PgPoolLike> | undefined;
  /** The pool once it exists: connect() then skips the wait for poolPromise. */
  private readyPool: PgPoolLike | undefined;
  private readonly ownsPool: boolean;
  /** How many checked-out connections may turn out dead before a call gives up (see checkout). */
  private readonly staleConnectionAttempts: number;
  /** BEGIN statements by lock timeout (see beginStatement). */
  private readonly begins = new Map<number | undefined, string>();
  /**
   * Ends each LISTEN connection held now (see listen): close() calls them, since a LISTEN
   * client stays checked out until unsubscribed and pg's pool.end() waits for every one.
   */
  private readonly listenEnders = new Set<(error: unknown) => void>();
  /** Set by close(): a LISTEN that was on its way then is ended as soon as it is taken. */
  private closing = false;
  /** Idle clients that lose their connection (a database restart) emit 'error' on the pool; unhandled, that would crash the process. */
  private readonly onPoolError = (error: Error): void => {
    this.log.warn('idle PostgreSQL connection failed; the pool discards it', { error });
  };

  constructor(
    private readonly source: PgPoolSource,
    private readonly log: Logger,
    private readonly timeouts: PgTimeouts,
    /**
     * Statement texts that may open a transaction inside BEGIN's message, their
     * parameters inlined as literals (the claims: strings and string arrays only).
     */
    private readonly mergeable: ReadonlySet<string> = new Set(),
  ) {
    this.ownsPool = !('pool' in source);
    this.staleConnectionAttempts = ('poolMax' in source ? source.poolMax : DEFAULT_STALE_ATTEMPTS) + 1;
    if ('pool' in source) {
      source.pool.on('error', this.onPoolError);
      this.poolPromise = Promise.resolve(source.pool);
      this.readyPool = source.pool;
    }
  }

  async transaction<T>(
    _operation: string,
    work: (client: SqlClient) => Promise<T>,
    lockTimeoutMs: number | undefined,
  ): Promise<T> {
    const begin = this.beginStatement(lockTimeoutMs);
    // BEGIN is not sent on its own: it travels with the transaction's first statement
    // (see open), so a claim costs no round trip of its own.
    let session: { client: PgPoolClientLike; watch: ClientWatch } | undefined;
    let opening: Promise<SqlResult<any>> | undefined;
    /** Statements issued while the first was on its way and not sent yet (see query). */
    let queued = 0;
    const timed: SqlClient = {
      query: <R>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> => {
        if (opening === undefined) {
          opening = this.open(begin, text, params).then((opened) => {
            session = opened;
            return opened.result;
          });
          return opening as Promise<SqlResult<R>>;
        }
        // Once the first statement answered and none waits behind it, a statement goes
        // out at once: chaining it on `opening` cost a promise, a closure and a microtask
        // per statement. While any waits, later ones queue too, so they keep call order.
        if (session !== undefined && queued === 0) {
          const { client, watch } = session;
          return this.timed(watch, client.query(text, params as unknown[])) as Promise<SqlResult<R>>;
        }
        // A statement issued while the first is still on its way waits for it (and fails with it).
        queued++;
        return opening.then(() => {
          queued--;
          const { client, watch } = session!;
          return this.timed(watch, client.query(text, params as unknown[])) as Promise<SqlResult<R>>;
        });
      },
    };
    let rollbackFailed = false;
    try {
      let result: T;
      try {
        result = await work(timed);
      } catch (error) {
        // A first statement still in flight decides whether there is a transaction to end.
        await opening?.catch(() => {});
        // A dead or timed-out connection cannot roll back; the server does when it notices.
        if (session !== undefined && session.watch.lost === undefined) {
          const { client, watch } = session;
          await this.timed(watch, client.query('ROLLBACK')).catch(() => {
            rollbackFailed = true;
          });
        }
        throw error;
      }
      // Waits for a first statement still in flight, and lets statements queued behind it
      // go out before COMMIT. The usual case (the work awaited its statements) skips the wait.
      if (session === undefined || queued > 0) await opening?.catch(() => {});
      // No statement was sent: no transaction was opened, nothing to commit.
      if (session === undefined) return result;
      const { client, watch } = session;
      const committed = (await this.timed(watch, client.query('COMMIT'))) as { command?: string };
      // PostgreSQL answers COMMIT of an aborted transaction with the tag ROLLBACK and no
      // error: nothing was written, and acking now would lose the message.
      if (committed.command === 'ROLLBACK') throw new TransactionAbortedError('COMMIT answered ROLLBACK');
      return result;
    } catch (error) {
      if (session?.watch.lost !== undefined) {
        // Also covers a COMMIT whose answer never arrived: its outcome is unknown, and the
        // retry after the outage finds the marker if it did commit.
        throw new StoreUnavailableError(
          `PostgreSQL connection lost during a transaction: ${describeError(error)}`,
          {
            cause: error,
          },
        );
      }
      throw error;
    } finally {
      session?.watch.release(rollbackFailed);
    }
  }

  /**
   * The statement that opens a store transaction. READ COMMITTED explicitly: claims rely
   * on re-checking the unique key after a wait, whatever default_transaction_isolation
   * the server has.
   */
  private beginStatement(lockTimeoutMs: number | undefined): string {
    // The same few texts for every transaction: built once each.
    let begin = this.begins.get(lockTimeoutMs);
    if (begin === undefined) {
      begin = this.buildBegin(lockTimeoutMs);
      this.begins.set(lockTimeoutMs, begin);
    }
    return begin;
  }

  private buildBegin(lockTimeoutMs: number | undefined): string {
    let begin = 'BEGIN ISOLATION LEVEL READ COMMITTED';
    if (lockTimeoutMs !== undefined) begin += `; ${lockTimeoutStatement(lockTimeoutMs)}`;
    const { idleInTransactionTimeoutMs } = this.timeouts;
    if (idleInTransactionTimeoutMs > 0) {
      begin += `; SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(idleInTransactionTimeoutMs)}`;
    }
    return begin;
  }

  /**
   * Opens the transaction with its first statement. A statement the store declared
   * mergeable (the claim) is sent with its parameters as literals in BEGIN's own
   * simple-protocol message: one round trip, and atomic in the way that matters — if
   * BEGIN fails, the server skips the rest of the message, so the claim can never run
   * (and commit) outside the transaction. Any other first statement follows BEGIN in a
   * round trip of its own, parameterized.
   */
  private async open(
    begin: string,
    text: string,
    params: readonly unknown[] | undefined,
  ): Promise<{ client: PgPoolClientLike; watch: ClientWatch; result: SqlResult<any> }> {
    const merged =
      params !== undefined && this.mergeable.has(text) ? inlineLiterals(text, params) : undefined;
    if (merged !== undefined) {
      const opened = await this.checkout(`${begin}; ${merged}`);
      // A multi-statement message answers with one result per statement: the claim's is last.
      const results = opened.result as unknown as SqlResult<any> | Array<SqlResult<any>>;
      const result = Array.isArray(results) ? results[results.length - 1]! : results;
      return { client: opened.client, watch: opened.watch, result };
    }
    const { client, watch } = await this.checkout(begin);
    try {
      const result = await this.timed(
        watch,
        params === undefined ? client.query(text) : client.query(text, params as unknown[]),
      );
      return { client, watch, result };
    } catch (error) {
      // The transaction is open (and now aborted): end it before the client goes back.
      if (watch.lost === undefined) {
        const rolledBack = await this.timed(watch, client.query('ROLLBACK')).then(
          () => true,
          () => false,
        );
        watch.release(!rolledBack);
      } else {
        watch.release(true);
        throw new StoreUnavailableError(
          `PostgreSQL connection lost during a transaction: ${describeError(error)}`,
          { cause: error },
        );
      }
      throw error;
    }
  }

  /**
   * Bounds one statement of `watch`'s client, already sent, by `queryTimeoutMs`. Past it
   * the connection is discarded (its answer can no longer be trusted to arrive) and the
   * call fails with `StoreUnavailableError`. Takes the statement's promise rather than a
   * function that sends it: one closure fewer per statement.
   */
  private timed<R>(watch: ClientWatch, statement: Promise<R>): Promise<R> {
    const ms = this.timeouts.queryTimeoutMs;
    if (ms <= 0) return statement.catch(markAndRethrow);
    return new Promise<R>((resolve, reject) => {
      const pending = watch.track(ms, reject);
      statement.then(
        (value) => {
          watch.untrack(pending);
          resolve(value);
        },
        (error: unknown) => {
          watch.untrack(pending);
          markFromStoreConnection(error);
          reject(error);
        },
      );
    });
  }

  async statement<R = Record<string, unknown>>(
    text: string,
    params: readonly unknown[],
  ): Promise<SqlResult<R>> {
    const { watch, result } = await this.checkout<R>(text, params);
    watch.release(false);
    return result;
  }

  async ping(): Promise<void> {
    const { watch } = await this.checkout('SELECT 1');
    watch.release(false);
  }

  /**
   * Checks a client out and runs `first` on it. After a database restart the pool can
   * still hold idle connections whose death it has not noticed yet; one failing on its
   * first statement has done nothing, so it is destroyed and another is tried, up to
   * once per pooled connection plus one fresh one.
   */
  private async checkout<R = Record<string, unknown>>(
    first: string,
    params?: readonly unknown[],
  ): Promise<{ client: PgPoolClientLike; watch: ClientWatch; result: SqlResult<R> }> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.connect();
      const watch = watchClient(client, this.ownsPool);
      try {
        const result = (await this.timed(
          watch,
          params ? client.query(first, params) : client.query(first),
        )) as SqlResult<R>;
        return { client, watch, result };
      } catch (error) {
        // A statement that timed out is a partition, not a stale pooled connection: trying
        // every other connection would only multiply the wait.
        if (error instanceof StoreUnavailableError && watch.lost === error) throw error;
        markFromStoreConnection(error);
        const dead = watch.lost !== undefined || classifyPostgresError(error) === 'unavailable';
        watch.release(true);
        if (!dead) throw error;
        if (attempt >= this.staleConnectionAttempts) {
          throw new StoreUnavailableError(`PostgreSQL does not answer: ${describeError(error)}`, {
            cause: error,
          });
        }
      }
    }
  }

  async close(): Promise<void> {
    // First: pool.end() would wait for ever for a LISTEN client nobody releases (a relay
    // still running), and on a caller's pool it would stay checked out, LISTENing.
    this.closing = true;
    for (const end of [...this.listenEnders]) end(storeClosed());
    const pending = this.poolPromise;
    if (!pending) return;
    const pool = await pending.catch(() => undefined);
    if (!pool) return;
    if (this.ownsPool) {
      // Keep the error listener through end(): clients may still fail while closing.
      await pool.end();
    } else {
      pool.removeListener('error', this.onPoolError);
    }
  }

  /**
   * The advisory lock on a pooled connection held until release (it counts against the
   * pool). Released by destroying the connection rather than by `pg_advisory_unlock`: no
   * round trip a dead database could hold up, and no session state goes back to the pool.
   */
  async sessionLock(classId: number, key: string): Promise<HeldSessionLock | undefined> {
    const client = await this.connect();
    const state = { lost: false, done: false };
    const onBroken = () => {
      state.lost = true;
      end();
    };
    const end = () => {
      if (state.done) return;
      state.done = true;
      this.listenEnders.delete(onBroken);
      client.removeListener('end', onBroken);
      client.release(true);
    };
    client.on('error', onBroken);
    client.on('end', onBroken);
    // close() ends it like a LISTEN connection: pool.end() would wait for it.
    this.listenEnders.add(onBroken);
    let locked: boolean;
    try {
      // A try-lock answers at once: no statement bound of its own.
      const { rows } = await client.query<{ locked: boolean }>(
        'SELECT pg_try_advisory_lock($1::integer, hashtext($2::text)) AS locked',
        [classId, key],
      );
      locked = rows[0]?.locked === true;
    } catch (error) {
      end();
      markFromStoreConnection(error);
      throw error;
    }
    if (!locked || this.closing) {
      end();
      return undefined;
    }
    return {
      get lost() {
        return state.lost;
      },
      release: async () => end(),
    };
  }

  /** LISTEN on a pooled connection held until unsubscribed (it counts against the pool). */
  async listen(
    channel: string,
    onNotify: (payload: string) => void,
    onLost: (error: unknown) => void,
  ): Promise<() => Promise<void>> {
    const client = await this.connect();
    // pg emits 'notification'; PgPoolClientLike declares only the events the store needs elsewhere.
    const events = client as unknown as {
      on(event: string, listener: (...args: any[]) => void): unknown;
      removeListener(event: string, listener: (...args: any[]) => void): unknown;
    };
    let done = false;
    const onNotification = (message: { channel: string; payload?: string }) => {
      if (message.channel === channel) onNotify(message.payload ?? '');
    };
    const onBroken = (error?: unknown) => {
      if (done) return;
      done = true;
      this.listenEnders.delete(onBroken);
      events.removeListener('notification', onNotification);
      client.release(true);
      onLost(error ?? new StoreUnavailableError('the LISTEN connection ended'));
    };
    events.on('notification', onNotification);
    events.on('error', onBroken);
    events.on('end', onBroken);
    // Ended by close() as a lost connection (destroyed, not UNLISTENed: no round trip
    // that a dead database could hold up), so the subscriber hears of it.
    this.listenEnders.add(onBroken);
    try {
      await client.query(`LISTEN ${quoteChannel(channel)}`);
    } catch (error) {
      this.listenEnders.delete(onBroken);
      done = true;
      events.removeListener('notification', onNotification);
      events.removeListener('error', onBroken);
      events.removeListener('end', onBroken);
      client.release(true);
      markFromStoreConnection(error);
      throw error;
    }
    if (this.closing) onBroken(storeClosed());
    return async () => {
      if (done) return;
      done = true;
      this.listenEnders.delete(onBroken);
      events.removeListener('notification', onNotification);
      events.removeListener('end', onBroken);
      // Bounded like any statement: on a silent connection the UNLISTEN never answers (TCP
      // keepalive notices after hours) and relay.stop() waited for it. Destroying the
      // client also ends the LISTEN on the server.
      const ms = this.timeouts.queryTimeoutMs;
      let timer: NodeJS.Timeout | undefined;
      const unanswered = new Promise<never>((_, reject) => {
        if (ms > 0) timer = setTimeout(() => reject(new Error('UNLISTEN unanswered')), ms);
      });
      try {
        await Promise.race([client.query(`UNLISTEN ${quoteChannel(channel)}`), unanswered]);
        events.removeListener('error', onBroken);
        client.release();
      } catch {
        client.release(true);
      } finally {
        clearTimeout(timer);
      }
    };
  }

  /**
   * A pooled client. Once the pool exists this is `pool.connect()` with its failure
   * wrapped, without an async function around it: that frame and its two awaits cost
   * more than the rest of a checkout's bookkeeping.
   */
  private connect(): Promise<PgPoolClientLike> {
    const pool = this.readyPool;
    if (pool === undefined) return this.pool().then((created) => this.connectTo(created));
    return this.connectTo(pool);
  }

  private connectTo(pool: PgPoolLike): Promise<PgPoolClientLike> {
    try {
      return pool.connect().catch(this.connectFailed);
    } catch (error) {
      return Promise.reject(this.connectError(error));
    }
  }

  private readonly connectFailed = (error: unknown): never => {
    throw this.connectError(error);
  };

  private connectError(error: unknown): StoreUnavailableError {
    markFromStoreConnection(error);
    const at =
      'connectionString' in this.source ? ` at ${redactConnectionString(this.source.connectionString)}` : '';
    return new StoreUnavailableError(`cannot connect to PostgreSQL${at}: ${describeError(error)}`, {
      cause: error,
    });
  }

  private pool(): Promise<PgPoolLike> {
    this.poolPromise ??= this.createPool();
    return this.poolPromise;
  }

  private async createPool(): Promise<PgPoolLike> {
    if ('pool' in this.source) return this.source.pool;
    const { connectionString, poolMax, connectTimeoutMs } = this.source;
    const pg = await importPg();
    const pool = new pg.Pool({
      connectionString,
      max: poolMax,
      // Without a timeout a connect to an unreachable host waits for the OS (minutes),
      // and the consumer would not notice the outage.
      connectionTimeoutMillis: connectTimeoutMs,
      keepAlive: true,
    });
    pool.on('error', this.onPoolError);
    this.readyPool = pool;
    return pool;
  }
}

/**
 * A statement waiting for its answer, and how to fail it when `queryTimeoutMs` passes
 * first. A class rather than a literal with an `expire` closure: one is made per statement.
 */
class PendingStatement {
  readonly deadline: number;

  constructor(
    private readonly watch: ClientWatch,
    private readonly ms: number,
    private readonly reject: (error: unknown) => void,
  ) {
    this.deadline = Date.now() + ms;
  }

  expire(): void {
    const error = new StoreUnavailableError(
      `PostgreSQL did not answer within ${this.ms} ms (queryTimeoutMs): connection discarded`,
    );
    this.watch.kill(error);
    this.reject(error);
  }
}

/** What the store has seen of one pooled connection, for its whole life. */
class ConnectionState {
  /** The first error or end event seen on the connection, if any. */
  lost: unknown;
  /** Statements sent on it and not answered yet (rarely more than one: a plain array). */
  private readonly pending: PendingStatement[] = [];
  /**
   * One timer bounds every pending statement: armed when the first is sent and re-armed
   * for the next deadline when it fires, instead of a timer set and cleared per statement
   * (that cost more CPU than the rest of the driver's bookkeeping). Unref'd: an idle
   * connection's leftover timer must not keep the process alive.
   */
  private timer: NodeJS.Timeout | undefined;

  track(statement: PendingStatement, ms: number): void {
    this.pending.push(statement);
    if (this.timer === undefined) this.arm(ms);
  }

  untrack(statement: PendingStatement): void {
    const { pending } = this;
    const index = pending.indexOf(statement);
    if (index < 0) return;
    // Order does not matter: the last one takes the freed slot.
    const last = pending.pop()!;
    if (index < pending.length) pending[index] = last;
  }

  private arm(delayMs: number): void {
    this.timer = setTimeout(this.expireOverdue, delayMs);
    this.timer.unref?.();
  }

  private readonly expireOverdue = (): void => {
    this.timer = undefined;
    const now = Date.now();
    const overdue = this.pending.filter((statement) => statement.deadline <= now);
    for (const statement of overdue) this.untrack(statement);
    let next = Number.POSITIVE_INFINITY;
    for (const statement of this.pending) next = Math.min(next, statement.deadline);
    for (const statement of overdue) statement.expire();
    if (next !== Number.POSITIVE_INFINITY) this.arm(Math.max(1, next - now));
  };
}

/** Per client of the store's own pool: its listeners are attached once, not per transaction. */
const connections = new WeakMap<PgPoolClientLike, ConnectionState>();

/**
 * Watches a checked-out client. While checked out, a client's socket error is emitted on
 * the client (the pool only listens to idle ones): without our listener it would crash
 * the process; with it, we learn — without reading any message text — that the
 * connection is gone. On the store's own pool the listeners stay on the client for its
 * life (attaching and removing them around every transaction cost more than the rest of
 * the watch): a connection seen lost is destroyed, never pooled again, so its state is
 * never stale. A caller's pool may hand out a new wrapper around the same client at every
 * checkout, so there they are removed when the client goes back (`detach`).
 */
class ClientWatch {
  private released = false;

  constructor(
    private readonly client: PgPoolClientLike,
    private readonly state: ConnectionState,
    private readonly detach?: () => void,
  ) {}

  /** The first error or end event seen on the client's connection, if any. */
  get lost(): unknown {
    return this.state.lost;
  }

  /**
   * Bounds one statement by `ms`: past it the connection is declared dead and destroyed,
   * and `reject` gets the `StoreUnavailableError`.
   */
  track(ms: number, reject: (error: unknown) => void): PendingStatement {
    const statement = new PendingStatement(this, ms, reject);
    this.state.track(statement, ms);
    return statement;
  }

  untrack(statement: PendingStatement): void {
    this.state.untrack(statement);
  }

  /** Declares the connection dead (a statement timed out) and destroys it now. */
  kill(reason: Error): void {
    this.state.lost ??= reason;
    this.release(true);
  }

  /** Gives the client back; a dead or suspect one is destroyed instead of pooled. */
  release(suspect: boolean): void {
    if (this.released) return;
    this.released = true;
    const { lost } = this.state;
    if (lost !== undefined || suspect) {
      // Destroyed: the listeners go with it, and keep catching its last errors meanwhile.
      this.client.release(lost instanceof Error ? lost : true);
      return;
    }
    // Synchronously before the release: the pool listens to it again as it takes it back.
    this.detach?.();
    this.client.release();
  }
}

/** `persistent`: the client comes from the store's own pool (see ClientWatch). */
function watchClient(client: PgPoolClientLike, persistent: boolean): ClientWatch {
  let state = persistent ? connections.get(client) : undefined;
  if (state === undefined) {
    const created = new ConnectionState();
    const onError = (error: unknown) => {
      created.lost ??= error ?? new Error('connection error');
    };
    const onEnd = () => {
      created.lost ??= new Error('connection ended');
    };
    client.on('error', onError);
    client.on('end', onEnd);
    if (!persistent) {
      return new ClientWatch(client, created, () => {
        client.removeListener('error', onError);
        client.removeListener('end', onEnd);
      });
    }
    connections.set(client, created);
    state = created;
  }
  return new ClientWatch(client, state);
}

/** A statement's error, marked as coming from the store's own connection. */
function markAndRethrow(error: unknown): never {
  markFromStoreConnection(error);
  throw error;
}

interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPoolLike;
}

async function importPg(): Promise<PgModule> {
  let mod: { default?: PgModule } & Partial<PgModule>;
  try {
    mod = (await import('pg')) as unknown as typeof mod;
  } catch (error) {
    if (isModuleNotFound(error)) throw new DriverNotInstalledError('pg', { cause: error });
    throw error;
  }
  const Pool = mod.default?.Pool ?? mod.Pool;
  if (!Pool) throw new DriverNotInstalledError('pg');
  return { Pool };
}

/** Node's code for a package that cannot be resolved. */
export function isModuleNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}

/** A channel name as a quoted identifier (channels are fixed strings; quoted all the same). */
export function quoteChannel(channel: string): string {
  return `"${channel.replaceAll('"', '""')}"`;
}

/** What a LISTEN subscriber hears when close() ended its connection. */
function storeClosed(): StoreUnavailableError {
  return new StoreUnavailableError('the store was closed; its LISTEN connection is ended');
}
