import type { SqlClient } from '@oncely/core';
import type { StoreDriver } from '../drivers/StoreDriver.js';
import { PostgresOutbox } from '../outbox/PostgresOutbox.js';
import type { StoreQueries } from '../queries.js';
import { StoreConnection } from './StoreConnection.js';
import { verifySchema } from './schema.js';

/**
 * What every concern of a PostgresStore shares: the driver, the SQL, the schema check's
 * state and the one transaction path (`run`). The store holds one; the concern files
 * (claims, attempts, leases, offsets, retention, schema) are functions called with it as
 * `this`, so their bodies read as the store's own methods did.
 */
export class StoreCore {
  /** The transactional outbox: `ctx.publish` writes here; `createRelay` sends it. */
  readonly outbox: PostgresOutbox;
  /** Set once the schema was found at this package's version; checked on first use. */
  schemaVerified = false;
  savepoints = 0;

  constructor(
    /** The schema holding the store's tables (unquoted). */
    readonly schema: string,
    readonly quotedSchema: string,
    readonly queries: StoreQueries,
    readonly driver: StoreDriver,
    readonly lockTimeoutMs: number,
  ) {
    this.outbox = new PostgresOutbox(this.quotedSchema, (operation, work) => this.run(operation, work));
  }

  /** Every store transaction: first use also checks the schema version. */
  run<T>(
    operation: string,
    work: (client: SqlClient) => Promise<T>,
    options: { verify?: boolean; lockTimeoutMs?: number | undefined } = {},
  ): Promise<T> {
    const verify = options.verify ?? true;
    const lockTimeoutMs = 'lockTimeoutMs' in options ? options.lockTimeoutMs : this.lockTimeoutMs;
    return this.driver.transaction(
      operation,
      async (client) => {
        const connection = new StoreConnection(client);
        try {
          if (verify && !this.schemaVerified) await verifySchema.call(this, connection);
          const result = await work(connection);
          // Checked here rather than inside: an await of an async call per transaction
          // that, on the usual path, has nothing to check.
          if (connection.statementFailed) await connection.assertCommittable();
          return result;
        } finally {
          // A handler still holding ctx.tx (it ignored its timeout) must not send
          // statements on a connection that is about to be committed, or back in the pool
          // serving someone else's transaction.
          connection.end();
        }
      },
      lockTimeoutMs,
    );
  }
}
