import type { IdempotencyStore, SqlClient } from '@oncely/core';
import { describe, it } from 'vitest';
import type { SqlDialect } from './sqlDialect.js';
import { transactionalClaimCases } from './storeCases/claims.js';
import { deadLetterLedgerCases } from './storeCases/deadLetterLedger.js';
import { leasedModeCases } from './storeCases/leases.js';
import { racingTransactionCases } from './storeCases/racing.js';
import { retentionAndSchemaCases } from './storeCases/retention.js';
import { type StoreCases, TestEnv } from './storeCases/testEnv.js';

/** One isolated store a conformance test runs against. */
export interface StoreUnderTest {
  /** The store, on its own schema (or database) that no other test uses. Migrated unless asked otherwise. */
  store: IdempotencyStore<SqlClient>;
  /**
   * Drops what the factory created. `passed` is false when the test failed: a factory may
   * then keep the schema as evidence.
   */
  cleanup(outcome?: { passed: boolean }): Promise<void>;
  /** The store runs several transactions at once (a real server). False for PGlite: racing cases are skipped. */
  concurrent: boolean;
  /**
   * Opens another store on the same database and schema with its own connections (a
   * second pool: another process, as far as the database can tell). Closed by the suite.
   * Without it, racing cases race on `store` alone.
   */
  sibling?(): Promise<IdempotencyStore<SqlClient>>;
  /**
   * Schema the suite creates its business tables in (dropped with it by `cleanup`).
   * Without it, tables get unique names in the default schema and the suite drops them.
   */
  schema?: string;
  /**
   * The SQL dialect of the store's transactions, for the suite's own tables and probes.
   * @default PostgreSQL's
   */
  sql?: SqlDialect;
  /**
   * Ends, from outside, the database session holding the dead-letter pass lock of
   * (consumer, queue) (`pg_terminate_backend`, `KILL`), as a killed process would. Without
   * it the case that checks the lock dies with its connection is skipped.
   */
  killDeadLetterLock?(consumer: string, queue: string): Promise<void>;
}

/** What a conformance test asks of the factory. */
export interface StoreFactoryOptions {
  /** False: an empty schema, for the test of concurrent `migrate()`. @default true */
  migrated?: boolean;
}

/** Builds one isolated {@link StoreUnderTest}; called once per test. */
export type StoreFactory = (options?: StoreFactoryOptions) => Promise<StoreUnderTest>;

/** What the caller already knows about the store, so skipped cases show up as such in the report. */
export interface StoreConformanceOptions {
  /** Declares single-connection stores (PGlite) up front: racing cases become `it.skip` with the reason in the title. */
  concurrent?: boolean;
  /** Per-test timeout. @default 60000 */
  timeoutMs?: number;
}

const SINGLE_CONNECTION = 'skipped: single-connection store (PGlite) runs one transaction at a time';

/**
 * The store conformance suite: every `IdempotencyStore` must pass it on each database it
 * supports (PostgreSQL and PGlite for `@oncely/postgres`). Each case creates its own
 * store through `createStore` and checks effects by counting rows written through the
 * transaction, never by counting handler calls alone.
 *
 * Each case notes the defect it catches. Racing cases need a store that runs several
 * transactions at once; on single-connection stores they are skipped with the reason in
 * the title.
 *
 * @example
 * ```ts
 * runStoreConformance('PostgreSQL', async (options) => {
 *   const schema = `t_${randomUUID().replaceAll('-', '')}`;
 *   const store = new PostgresStore({ connectionString, schema });
 *   if (options?.migrated !== false) await store.migrate();
 *   return {
 *     store,
 *     schema,
 *     concurrent: true,
 *     sibling: async () => new PostgresStore({ connectionString, schema }),
 *     cleanup: async () => { await dropSchema(schema); await store.close(); },
 *   };
 * });
 * ```
 */
export function runStoreConformance(
  name: string,
  createStore: StoreFactory,
  options: StoreConformanceOptions = {},
): void {
  const timeout = options.timeoutMs ?? 60_000;
  const racing = options.concurrent === false ? it.skip : it;
  const racingTitle = (title: string): string =>
    options.concurrent === false ? `${title} — ${SINGLE_CONNECTION}` : title;

  /** Runs one case on a fresh store and always cleans up (reporting whether it passed). */
  const withStore = async (
    body: (env: TestEnv) => Promise<void>,
    factoryOptions?: StoreFactoryOptions,
  ): Promise<void> => {
    const under = await createStore(factoryOptions);
    const env = new TestEnv(under);
    let passed = false;
    try {
      await body(env);
      passed = true;
    } finally {
      await env.close(passed);
    }
  };

  /** A racing case: skipped at run time too when the factory reports a single-connection store. */
  const racingCase = (title: string, body: (env: TestEnv) => Promise<void>): void => {
    racing(
      racingTitle(title),
      async (ctx) => {
        await withStore(async (env) => {
          if (!env.under.concurrent) ctx.skip(SINGLE_CONNECTION);
          await body(env);
        });
      },
      timeout,
    );
  };

  const cases: StoreCases = { withStore, racingCase, timeout };
  describe(`store conformance: ${name}`, () => {
    transactionalClaimCases(cases);
    racingTransactionCases(cases);
    leasedModeCases(cases);
    retentionAndSchemaCases(cases);
    deadLetterLedgerCases(cases);
  });
}
