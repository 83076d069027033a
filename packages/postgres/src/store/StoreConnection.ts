import type { SqlClient, SqlResult } from '@oncely/core';
import { markFromStoreConnection } from '../classifyError.js';
import { TransactionAbortedError, TransactionEndedError } from '../errors.js';

/**
 * The store's side of one transaction's connection (what handlers get as `ctx.tx`). It
 * marks every error a statement raises as coming from the store's connection (only those
 * may declare the store unavailable), and remembers that one failed: a caller that caught
 * it may have left the transaction aborted, and `assertCommittable` then refuses to let
 * the COMMIT pass as a success on any driver, including a caller's own transaction whose
 * COMMIT the store never sees.
 */
export class StoreConnection implements SqlClient {
  private failed: unknown;
  /** A statement failed (its error perhaps caught): see assertCommittable. */
  statementFailed = false;
  private ended = false;

  constructor(private readonly inner: SqlClient) {}

  /** The transaction's work is over: later statements are refused. */
  end(): void {
    this.ended = true;
  }

  // Not async: one promise per statement instead of three (every handler statement passes here).
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    let answer: Promise<SqlResult<R>>;
    try {
      answer = params === undefined ? this.inner.query<R>(text) : this.inner.query<R>(text, params);
    } catch (error) {
      return Promise.reject(this.failure(error));
    }
    return answer.then(undefined, this.rethrow);
  }

  private readonly rethrow = (error: unknown): never => {
    throw this.failure(error);
  };

  /** Marks a statement's error as the store's and remembers the first one. */
  private failure(error: unknown): unknown {
    markFromStoreConnection(error);
    if (!this.statementFailed) {
      this.statementFailed = true;
      this.failed = error;
    }
    return error;
  }

  /**
   * After the work resolved: when a statement failed (and was caught), one more round
   * trip tells whether the transaction is still usable (a savepoint rolled back) or
   * aborted (25P02), in which case the commit would silently roll back.
   */
  async assertCommittable(): Promise<void> {
    if (!this.statementFailed) return;
    try {
      await this.inner.query('SELECT 1');
    } catch (error) {
      markFromStoreConnection(error);
      if ((error as { code?: unknown }).code !== '25P02') throw error;
      throw new TransactionAbortedError(
        `a statement failed and its error was caught (${errorCode(this.failed)})`,
        {
          cause: this.failed,
        },
      );
    }
  }
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? `SQLSTATE ${code}` : 'no SQLSTATE';
}
