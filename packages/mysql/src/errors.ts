import { OncelyError } from '@oncely/core';

/**
 * Marks schema-version errors across duplicate copies of this package (nested
 * node_modules), where `instanceof` would fail.
 */
const SCHEMA_VERSION_ERROR = Symbol.for('oncely.mysql.schemaVersionError');

/**
 * The store's tables are not at the version this package works with: never migrated or
 * behind (code `'SCHEMA_NOT_MIGRATED'`: call `migrate()`), or migrated by a newer
 * `@oncely/mysql` (code `'SCHEMA_TOO_NEW'`: upgrade this package; migrations are
 * forward-only).
 *
 * Classified `'unavailable'`: a consumer fails closed (pauses, processes nothing,
 * dead-letters nothing) until the schema is right.
 *
 * @example
 * ```ts
 * try {
 *   await store.migrate();
 * } catch (error) {
 *   if (isMySqlSchemaVersionError(error) && error.found > error.expected) console.error('deploy the newer version');
 * }
 * ```
 */
export class MySqlSchemaVersionError extends OncelyError {
  readonly [SCHEMA_VERSION_ERROR] = true;
  constructor(
    /** The database checked. */
    readonly schema: string,
    /** Highest migration applied in the database (0: never migrated). */
    readonly found: number,
    /** Highest migration this package ships. */
    readonly expected: number,
    options?: ErrorOptions,
  ) {
    super(
      found < expected ? 'SCHEMA_NOT_MIGRATED' : 'SCHEMA_TOO_NEW',
      message(schema, found, expected),
      options,
    );
  }
}

function message(schema: string, found: number, expected: number): string {
  if (found > expected) {
    return (
      `database \`${schema}\` was migrated to version ${found} by a newer @oncely/mysql; this one knows ` +
      `versions up to ${expected}. Upgrade @oncely/mysql (migrations are forward-only).`
    );
  }
  if (found === 0)
    return `database \`${schema}\` has no Oncely tables: call store.migrate() (or run \`oncely migrate\`) first`;
  return `database \`${schema}\` is at version ${found}, this package needs ${expected}: call store.migrate() (or run \`oncely migrate\`) first`;
}

/**
 * True when `error` is a {@link MySqlSchemaVersionError}, even from another copy of this package.
 *
 * @example
 * ```ts
 * if (isMySqlSchemaVersionError(error)) console.error(error.message);
 * ```
 */
export function isMySqlSchemaVersionError(error: unknown): error is MySqlSchemaVersionError {
  return typeof error === 'object' && error !== null && SCHEMA_VERSION_ERROR in error;
}

/**
 * The transaction cannot commit: a statement inside it failed and its error was caught
 * outside `ctx.savepoint()`, or the transaction ended inside the handler (a DDL statement,
 * which MySQL commits implicitly, or a `COMMIT`/`ROLLBACK` sent through `ctx.tx`). MySQL
 * itself would often carry on (it undoes only the failed statement), but after a
 * deadlock it has rolled the whole transaction back and runs later statements outside
 * any transaction: so this store, like the PostgreSQL one, refuses every statement after
 * the failure and the commit. The attempt fails (rolled back, retried, counted); the
 * message is never acked on a transaction that did not commit whole. `cause` is the
 * first error.
 *
 * @example
 * ```ts
 * if (error instanceof MySqlTransactionAbortedError) console.error('handler swallowed', error.cause);
 * ```
 */
export class MySqlTransactionAbortedError extends OncelyError {
  constructor(detail: string, options?: ErrorOptions) {
    super(
      'TRANSACTION_ABORTED',
      `the transaction cannot commit: ${detail}. Run statements that may fail under ctx.savepoint(), and no DDL or COMMIT/ROLLBACK through ctx.tx`,
      options,
    );
  }
}

/**
 * A statement was sent through a transaction's client after that transaction ended (a
 * handler kept using `ctx.tx` after its timeout or after it returned): refused rather
 * than run on a connection being committed or already serving another transaction.
 *
 * @example
 * ```ts
 * if (error instanceof MySqlTransactionEndedError) console.error('a handler outlived its transaction');
 * ```
 */
export class MySqlTransactionEndedError extends OncelyError {
  constructor() {
    super(
      'TRANSACTION_ENDED',
      'this transaction has ended: a statement sent through ctx.tx after the handler returned or timed out is refused',
    );
  }
}

/**
 * A message ID or consumer name longer than the marker's key columns hold (2048 and 800
 * bytes of UTF-8). Never truncated: two long IDs that share a prefix would become one.
 *
 * @example
 * ```ts
 * if (isOncelyError(error, 'KEY_TOO_LONG')) console.error(error.message);
 * ```
 */
export class KeyTooLongError extends OncelyError {
  constructor(field: 'messageId' | 'consumer', bytes: number, limit: number) {
    super(
      'KEY_TOO_LONG',
      `${field} is ${bytes} bytes of UTF-8; the MySQL store keeps at most ${limit} (choose a shorter ID strategy)`,
    );
  }
}
