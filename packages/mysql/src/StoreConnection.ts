import type { SqlClient, SqlResult } from '@oncely/core';
import { markFromStoreConnection } from './classifyError.js';
import type { RawConnection } from './drivers/MySqlDriver.js';
import { MySqlTransactionAbortedError, MySqlTransactionEndedError } from './errors.js';

/**
 * The store's side of one transaction's connection (what handlers get as `ctx.tx`).
 *
 * MySQL undoes only a failed statement and carries on, except after a deadlock, when it
 * has rolled the whole transaction back and runs the statements that follow in autocommit
 * (each one committed at once, without the marker). A handler that catches an error and
 * goes on writing would then commit effects the marker does not cover. So this client
 * keeps PostgreSQL's rule, the one core documents for every store: after a statement
 * fails outside `ctx.savepoint()`, every later statement and the commit are refused
 * ({@link MySqlTransactionAbortedError}, the first error as `cause`); inside a savepoint,
 * until it is rolled back. It also watches the server's "in transaction" flag after each
 * statement: a DDL statement (MySQL commits it implicitly) or a COMMIT/ROLLBACK sent
 * through `ctx.tx` ends the transaction, and everything after it is refused the same way.
 */
export class StoreConnection implements SqlClient {
  /** The first failure at each savepoint level; index 0 is the transaction itself. */
  private readonly failures: unknown[] = [undefined];
  private ended = false;

  constructor(private readonly inner: RawConnection) {}

  /** The transaction's work is over: later statements are refused. */
  end(): void {
    this.ended = true;
  }

  // Not async: one promise per statement fewer (every handler statement passes here).
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<SqlResult<R>> {
    const refused = this.refusal();
    if (refused) return Promise.reject(refused);
    return this.send<R>(text, params, undefined);
  }

  /**
   * A statement of the store's own whose listed error numbers are answers, not failures
   * (a claim's ER_DUP_ENTRY): such an error is rethrown without marking the transaction.
   * Sent as {@link RawConnection.ownStatement} where the driver has it (no stack captured).
   */
  queryExpecting<R = Record<string, unknown>>(
    text: string,
    params: readonly unknown[],
    expected: ReadonlySet<number>,
  ): Promise<SqlResult<R>> {
    const refused = this.refusal();
    if (refused) return Promise.reject(refused);
    return this.send<R>(text, params, expected);
  }

  /**
   * Queues `text` to run on this connection after the transaction ends (commit or
   * rollback), before the connection is pooled again. False when the connection cannot
   * (a caller's own transaction, whose end the store does not see).
   */
  runAfterTransaction(text: string, params: readonly unknown[]): boolean {
    if (!this.inner.runAfterTransaction) return false;
    this.inner.runAfterTransaction(text, params);
    return true;
  }

  /** After `SAVEPOINT name` succeeded. */
  enteredSavepoint(): void {
    this.failures.push(undefined);
  }

  /** The first failure inside the innermost savepoint, if a statement there failed. */
  savepointFailure(): unknown {
    return this.failures.length > 1 ? this.failures[this.failures.length - 1] : undefined;
  }

  /**
   * Rolls back to the innermost savepoint and forgets its failures. If that fails (the
   * server already rolled the whole transaction back: a deadlock), the transaction is
   * marked failed instead. Never throws: the work's own error is the one to report.
   */
  async rollbackToSavepoint(name: string): Promise<void> {
    const failure = this.failures.pop();
    if (this.ended) return;
    try {
      await this.inner.query(`ROLLBACK TO SAVEPOINT ${name}`);
    } catch (error) {
      markFromStoreConnection(error);
      this.failures[0] ??= failure ?? error;
    }
  }

  /** `RELEASE SAVEPOINT name` after the savepoint's work succeeded with no failed statement. */
  async releaseSavepoint(name: string): Promise<void> {
    await this.query(`RELEASE SAVEPOINT ${name}`);
    this.failures.pop();
  }

  /**
   * Before the commit: refuses it when a statement failed outside a savepoint (its error
   * caught) or the transaction ended inside the work.
   */
  assertCommittable(): void {
    const failure = this.failures[0];
    if (failure !== undefined) throw abortedBy(failure);
  }

  private refusal(): Error | undefined {
    if (this.ended) return new MySqlTransactionEndedError();
    for (const failure of this.failures) if (failure !== undefined) return abortedBy(failure);
    return undefined;
  }

  private send<R>(
    text: string,
    params: readonly unknown[] | undefined,
    expected: ReadonlySet<number> | undefined,
  ): Promise<SqlResult<R>> {
    let answer: Promise<SqlResult<R>>;
    try {
      // The store's own statement (a claim) captures no stack where the driver can skip it.
      answer =
        expected !== undefined && params !== undefined && this.inner.ownStatement
          ? this.inner.ownStatement<R>(text, params)
          : params === undefined
            ? this.inner.query<R>(text)
            : this.inner.query<R>(text, params);
    } catch (error) {
      return Promise.reject(this.failed(error, expected));
    }
    return answer.then(
      (result) => {
        if (this.inner.inTransaction() === false) {
          this.failures[0] ??= new TransactionEndedInside(text);
        }
        return result;
      },
      (error: unknown) => {
        throw this.failed(error, expected);
      },
    );
  }

  private failed(error: unknown, expected: ReadonlySet<number> | undefined): unknown {
    markFromStoreConnection(error);
    const errno = (error as { errno?: unknown } | null)?.errno;
    if (expected && typeof errno === 'number' && expected.has(errno)) return error;
    const level = this.failures.length - 1;
    this.failures[level] ??= error;
    return error;
  }
}

/** The server reported no open transaction after a statement of the work. */
class TransactionEndedInside extends Error {
  constructor(readonly statement: string) {
    super(
      `the transaction ended inside the work, after: ${statement.trim().split('\n', 1)[0]!.slice(0, 120)} (DDL commits implicitly in MySQL)`,
    );
  }
}

function abortedBy(failure: unknown): MySqlTransactionAbortedError {
  if (failure instanceof TransactionEndedInside) return new MySqlTransactionAbortedError(failure.message);
  const errno = (failure as { errno?: unknown } | null)?.errno;
  const detail =
    typeof errno === 'number' ? `errno ${errno}` : failure instanceof Error ? failure.name : 'an error';
  return new MySqlTransactionAbortedError(`a statement failed (${detail}) and its error was caught`, {
    cause: failure,
  });
}
