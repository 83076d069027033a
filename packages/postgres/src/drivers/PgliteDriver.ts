import type { SqlClient, SqlResult } from '@oncely/core';
import { StoreUnavailableError } from '@oncely/core';
import { DriverNotInstalledError } from '../errors.js';
import { isModuleNotFound } from './PgDriver.js';
import type { HeldSessionLock, StoreDriver } from './StoreDriver.js';
import { describeError, lockTimeoutStatement } from './StoreDriver.js';
import type { TransactionGate } from './TransactionGate.js';
import { gateFor } from './TransactionGate.js';

/**
 * One result as PGlite returns it.
 *
 * @example
 * ```ts
 * const result: PgliteResultsLike = await pglite.query('SELECT 1 AS one');
 * ```
 */
export interface PgliteResultsLike<R = Record<string, unknown>> {
  rows: R[];
  affectedRows?: number;
  rowCount?: number;
}

/**
 * The part of a PGlite transaction the store uses.
 *
 * @example
 * ```ts
 * await pglite.transaction(async (tx: PgliteTransactionLike) => tx.query('SELECT 1'));
 * ```
 */
export interface PgliteTransactionLike {
  query<R>(text: string, params?: any[]): Promise<PgliteResultsLike<R>>;
  exec(text: string): Promise<Array<PgliteResultsLike>>;
}

/**
 * The part of a `PGlite` instance the store uses; a real `PGlite` fits it.
 *
 * @example
 * ```ts
 * import { PGlite } from '@electric-sql/pglite';
 * const pglite: PgliteLike = await PGlite.create();
 * const store = new PostgresStore({ pglite }); // your app's tables live in the same database
 * ```
 */
export interface PgliteLike {
  query<R>(text: string, params?: any[]): Promise<PgliteResultsLike<R>>;
  transaction<T>(callback: (tx: PgliteTransactionLike) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** Where the PGlite instance comes from: the caller's, or one we start (and close). */
export type PgliteSource = { pglite: PgliteLike } | { dataDir: string | undefined };

/** The session locks held on each PGlite instance (keyed by its gate, one per instance). */
const heldLocks = new WeakMap<TransactionGate, Set<string>>();

/**
 * The PGlite driver: the same SQL in-process, on a single connection. Transactions run
 * one at a time through a {@link TransactionGate}; re-entry from inside a transaction
 * throws `StoreReentrancyError` instead of deadlocking.
 */
export class PgliteDriver implements StoreDriver {
  private instance: Promise<PgliteLike> | undefined;
  private readonly gate: TransactionGate;
  private readonly owns: boolean;
  private readonly dataDir: string | undefined;

  constructor(source: PgliteSource) {
    if ('pglite' in source) {
      this.instance = Promise.resolve(source.pglite);
      this.gate = gateFor(source.pglite);
      this.owns = false;
    } else {
      this.gate = gateFor(this);
      this.owns = true;
      this.dataDir = source.dataDir;
    }
  }

  transaction<T>(
    operation: string,
    work: (client: SqlClient) => Promise<T>,
    lockTimeoutMs: number | undefined,
  ): Promise<T> {
    return this.gate.run(operation, async () => {
      const db = await this.db();
      return db.transaction(async (tx) => {
        // Nothing else can hold a lock on a single connection; kept so the same SQL runs
        // everywhere and a lock wait can never outlive the timeout.
        if (lockTimeoutMs !== undefined) await tx.query(lockTimeoutStatement(lockTimeoutMs));
        return work(pgliteClient(tx));
      });
    });
  }

  /** PGlite's own `listen()`: notifications of the single connection, in this process. */
  async listen(
    channel: string,
    onNotify: (payload: string) => void,
    _onLost: (error: unknown) => void,
  ): Promise<() => Promise<void>> {
    const db = (await this.db()) as PgliteLike & {
      listen?(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
    };
    if (typeof db.listen !== 'function') throw new Error('this PGlite instance has no listen()');
    // Through the gate: on one connection a LISTEN sent while a transaction is open would run inside it.
    const unlisten = await this.gate.run('listen()', () => db.listen!(channel, onNotify));
    return () => this.gate.run('unlisten()', () => unlisten());
  }

  /**
   * An in-process mutex per PGlite instance: PGlite is one connection inside this process,
   * so the lock and the database die together and no other process can take it meanwhile.
   */
  async sessionLock(classId: number, key: string): Promise<HeldSessionLock | undefined> {
    let held = heldLocks.get(this.gate);
    if (!held) {
      held = new Set();
      heldLocks.set(this.gate, held);
    }
    const name = `${classId}:${key}`;
    if (held.has(name)) return undefined;
    held.add(name);
    let released = false;
    return {
      lost: false,
      release: async () => {
        if (released) return;
        released = true;
        held.delete(name);
      },
    };
  }

  ping(): Promise<void> {
    return this.gate.run('ping()', async () => {
      const db = await this.db();
      try {
        await db.query('SELECT 1');
      } catch (error) {
        throw new StoreUnavailableError(`PGlite does not answer: ${describeError(error)}`, { cause: error });
      }
    });
  }

  async close(): Promise<void> {
    if (!this.owns || !this.instance) return;
    const db = await this.instance.catch(() => undefined);
    await db?.close();
  }

  private db(): Promise<PgliteLike> {
    this.instance ??= startPglite(this.dataDir);
    return this.instance;
  }
}

/**
 * `ctx.tx` on PGlite: `query(text, params)` like pg. Without parameters the text goes
 * through the simple protocol (several statements allowed), as pg does.
 */
function pgliteClient(tx: PgliteTransactionLike): SqlClient {
  return {
    async query<R = Record<string, unknown>>(
      text: string,
      params?: readonly unknown[],
    ): Promise<SqlResult<R>> {
      if (params === undefined || params.length === 0) {
        const results = await tx.exec(text);
        return toSqlResult(results[results.length - 1] as PgliteResultsLike<R> | undefined);
      }
      return toSqlResult(await tx.query<R>(text, [...params]));
    },
  };
}

function toSqlResult<R>(result: PgliteResultsLike<R> | undefined): SqlResult<R> {
  if (!result) return { rows: [], rowCount: null };
  return { rows: result.rows, rowCount: result.rowCount ?? result.affectedRows ?? null };
}

async function startPglite(dataDir: string | undefined): Promise<PgliteLike> {
  let mod: { PGlite: { create(options?: { dataDir?: string }): Promise<PgliteLike> } };
  try {
    mod = (await import('@electric-sql/pglite')) as unknown as typeof mod;
  } catch (error) {
    if (isModuleNotFound(error)) throw new DriverNotInstalledError('@electric-sql/pglite', { cause: error });
    throw error;
  }
  return mod.PGlite.create(dataDir === undefined ? undefined : { dataDir });
}
