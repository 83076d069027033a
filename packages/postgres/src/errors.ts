import { OncelyError } from '@oncely/core';

/**
 * Marks schema-version errors across duplicate copies of this package (nested
 * node_modules), where `instanceof` would fail.
 */
const SCHEMA_VERSION_ERROR = Symbol.for('oncely.postgres.schemaVersionError');

/**
 * The optional peer package a store needs (`pg` or `@electric-sql/pglite`) is not
 * installed in the application.
 *
 * Its `code` is `'ADAPTER_NOT_INSTALLED'`, the code core uses for every missing optional
 * package, so one check covers adapters and store drivers.
 *
 * @example
 * ```ts
 * try {
 *   await PostgresStore.embedded().migrate();
 * } catch (error) {
 *   if (error instanceof DriverNotInstalledError) console.error(`npm install ${error.packageName}`);
 * }
 * ```
 */
export class DriverNotInstalledError extends OncelyError {
  constructor(
    readonly packageName: string,
    options?: ErrorOptions,
  ) {
    super(
      'ADAPTER_NOT_INSTALLED',
      `@oncely/postgres needs the package ${packageName} for this store: run \`npm install ${packageName}\` in your application`,
      options,
    );
  }
}

/**
 * The store's schema is not at the version this package works with: either it was never
 * migrated or is behind (code `'SCHEMA_NOT_MIGRATED'`: call `migrate()`), or a newer
 * `@oncely/postgres` migrated it (code `'SCHEMA_TOO_NEW'`: upgrade this package;
 * migrations are forward-only and never undone).
 *
 * Classified `'unavailable'` by {@link classifyPostgresError}: a consumer fails closed
 * (pauses, processes nothing, dead-letters nothing) until the schema is right, instead of
 * failing every message into the dead-letter queue.
 *
 * @example
 * ```ts
 * try {
 *   await store.migrate();
 * } catch (error) {
 *   if (isSchemaVersionError(error) && error.found > error.expected) console.error('deploy the newer version');
 * }
 * ```
 */
export class SchemaVersionError extends OncelyError {
  readonly [SCHEMA_VERSION_ERROR] = true;
  constructor(
    /** The schema checked. */
    readonly schema: string,
    /** Highest migration applied in the database (0: never migrated). */
    readonly found: number,
    /** Highest migration this package ships. */
    readonly expected: number,
    options?: ErrorOptions,
  ) {
    super(
      found < expected ? 'SCHEMA_NOT_MIGRATED' : 'SCHEMA_TOO_NEW',
      schemaVersionMessage(schema, found, expected),
      options,
    );
  }
}

function schemaVersionMessage(schema: string, found: number, expected: number): string {
  if (found > expected) {
    return (
      `schema "${schema}" was migrated to version ${found} by a newer @oncely/postgres; this one knows ` +
      `versions up to ${expected}. Upgrade @oncely/postgres (migrations are forward-only).`
    );
  }
  if (found === 0)
    return `schema "${schema}" is not migrated: call store.migrate() (or run \`oncely migrate\`) first`;
  return `schema "${schema}" is at version ${found}, this package needs ${expected}: call store.migrate() (or run \`oncely migrate\`) first`;
}

/**
 * True when `error` is a {@link SchemaVersionError}, even from another copy of this package.
 *
 * @example
 * ```ts
 * if (isSchemaVersionError(error)) console.error(error.message);
 * ```
 */
export function isSchemaVersionError(error: unknown): error is SchemaVersionError {
  return typeof error === 'object' && error !== null && SCHEMA_VERSION_ERROR in error;
}

/**
 * The transaction did not commit although no error reached the store: a statement failed
 * inside it and the handler caught the error (the "ignore 23505" idiom), so PostgreSQL
 * aborted the transaction and answered the `COMMIT` with `ROLLBACK`. Neither the marker
 * nor the effect exists, so the message must not be acked: this error makes the attempt
 * a failure (rolled back, retried, counted). `cause` is the statement error that was
 * swallowed.
 *
 * To expect an error inside a handler, run the statement under a savepoint:
 * `await ctx.savepoint(() => ctx.tx.query(...)).catch(...)`.
 *
 * @example
 * ```ts
 * if (error instanceof TransactionAbortedError) console.error('handler swallowed', error.cause);
 * ```
 */
export class TransactionAbortedError extends OncelyError {
  constructor(detail: string, options?: ErrorOptions) {
    super(
      'TRANSACTION_ABORTED',
      `the transaction was rolled back instead of committed: ${detail}. A statement inside it failed and its error was caught; run statements that may fail under ctx.savepoint()`,
      options,
    );
  }
}

/**
 * A statement was sent through a transaction's client after that transaction ended: a
 * handler kept using `ctx.tx` after its timeout, or after it returned. The statement is
 * refused rather than run on a connection that is being committed or already serves
 * another transaction.
 *
 * @example
 * ```ts
 * if (error instanceof TransactionEndedError) console.error('a handler outlived its transaction');
 * ```
 */
export class TransactionEndedError extends OncelyError {
  constructor() {
    super(
      'TRANSACTION_ENDED',
      'this transaction has ended: a statement sent through ctx.tx after the handler returned or timed out is refused',
    );
  }
}
