import type { SqlClient } from '@oncely/core';
import { StoreUnavailableError } from '@oncely/core';
import type { MySqlDriver, RawConnection } from './MySqlDriver.js';
import { describeError } from './MySqlDriver.js';

/**
 * Runs `work` inside a transaction of the caller's own library (Knex, Drizzle, Prisma,
 * TypeORM, mysql2) and returns what it returns. It must hand `work` a client that runs
 * `?`-placeholder SQL on that transaction's connection and answers `{ rows, rowCount }`
 * (rows of a SELECT; `rowCount` the affected rows of a write), commit when `work` resolves
 * and roll back when it throws. The store never sends START TRANSACTION, COMMIT or
 * ROLLBACK in this mode. Use READ COMMITTED (see the README for what REPEATABLE READ,
 * MySQL's default, changes).
 *
 * @example
 * ```ts
 * // Knex: its transaction's raw() takes ?-placeholders on MySQL.
 * const store = new MySqlStore({
 *   transaction: (work) =>
 *     knex.transaction((trx) =>
 *       work({
 *         query: async (text, params = []) => {
 *           const [result] = await trx.raw(text, params as any[]);
 *           return Array.isArray(result)
 *             ? { rows: result, rowCount: result.length }
 *             : { rows: [], rowCount: result.affectedRows };
 *         },
 *       }),
 *       { isolationLevel: 'read committed' },
 *     ),
 * });
 * ```
 */
export type MySqlCallerTransaction = <T>(work: (client: SqlClient) => Promise<T>) => Promise<T>;

/** The driver for {@link MySqlCallerTransaction}: every store operation runs in the caller's transaction. */
export class CallerTransactionDriver implements MySqlDriver {
  constructor(private readonly run: MySqlCallerTransaction) {}

  transaction<T>(_operation: string, work: (connection: RawConnection) => Promise<T>): Promise<T> {
    return this.run((client) => work(callerConnection(client)));
  }

  /** Migrations in the caller's transaction: MySQL commits each DDL statement implicitly. */
  session<T>(work: (connection: RawConnection) => Promise<T>): Promise<T> {
    return this.run((client) => work(callerConnection(client)));
  }

  async ping(): Promise<void> {
    try {
      await this.run((client) => client.query('DO 0'));
    } catch (error) {
      throw new StoreUnavailableError(`MySQL does not answer: ${describeError(error)}`, { cause: error });
    }
  }

  async close(): Promise<void> {
    // The connections are the caller's.
  }
}

function callerConnection(client: SqlClient): RawConnection {
  return {
    query: (text, params) => (params === undefined ? client.query(text) : client.query(text, params)),
    inTransaction: () => undefined,
  };
}
