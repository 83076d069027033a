import type { SqlClient } from '@oncely/core';
import { StoreUnavailableError } from '@oncely/core';
import type { StoreDriver } from './StoreDriver.js';
import { describeError, lockTimeoutStatement } from './StoreDriver.js';

/**
 * Runs `work` inside a transaction of the caller's own library (Knex, Drizzle, Prisma,
 * plain pg) and returns what it returns. It must hand `work` a client that runs `$1`-style
 * parameterized SQL on that transaction's connection, commit when `work` resolves and
 * roll back when it throws. Commit and rollback are the caller's: the store never issues
 * BEGIN, COMMIT or ROLLBACK in this mode. Use READ COMMITTED (PostgreSQL's default): a
 * claim waiting on another transaction's marker relies on it.
 *
 * @example
 * ```ts
 * // Prisma: $queryRawUnsafe takes $1-style parameters on PostgreSQL.
 * const store = new PostgresStore({
 *   transaction: (work) =>
 *     prisma.$transaction((db) =>
 *       work({
 *         query: async (text, params = []) => {
 *           const rows = await db.$queryRawUnsafe<any[]>(text, ...params);
 *           return { rows, rowCount: rows.length };
 *         },
 *       }),
 *     ),
 * });
 * ```
 */
export type CallerTransaction = <T>(work: (client: SqlClient) => Promise<T>) => Promise<T>;

/** The driver for {@link CallerTransaction}: every store operation runs in the caller's transaction. */
export class CallerTransactionDriver implements StoreDriver {
  constructor(private readonly run: CallerTransaction) {}

  transaction<T>(
    _operation: string,
    work: (client: SqlClient) => Promise<T>,
    lockTimeoutMs: number | undefined,
  ): Promise<T> {
    return this.run(async (client) => {
      if (lockTimeoutMs !== undefined) await client.query(lockTimeoutStatement(lockTimeoutMs));
      return work(client);
    });
  }

  async ping(): Promise<void> {
    try {
      await this.run((client) => client.query('SELECT 1'));
    } catch (error) {
      throw new StoreUnavailableError(`PostgreSQL does not answer: ${describeError(error)}`, {
        cause: error,
      });
    }
  }

  async close(): Promise<void> {
    // The connections are the caller's.
  }
}
