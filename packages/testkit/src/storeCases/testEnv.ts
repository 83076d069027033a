/**
 * What the store conformance cases share: the per-test environment (unique names, business
 * tables, row counts, a rollback probe) and the helpers the runner hands every case file.
 */
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore, LeaseClaim, MessageKey, SqlClient } from '@oncely/core';
import { expect } from 'vitest';
import { POSTGRES_DIALECT, type SqlDialect } from '../sqlDialect.js';
import type { StoreFactoryOptions, StoreUnderTest } from '../storeConformance.js';

/** What every case file gets from {@link runStoreConformance}. */
export interface StoreCases {
  /** Runs one case on a fresh store and always cleans up (reporting whether it passed). */
  withStore(body: (env: TestEnv) => Promise<void>, factoryOptions?: StoreFactoryOptions): Promise<void>;
  /** A racing case: skipped at run time too when the factory reports a single-connection store. */
  racingCase(title: string, body: (env: TestEnv) => Promise<void>): void;
  /** Per-test timeout. */
  timeout: number;
}

/** Per-test helpers: unique names, business tables, row counts. */
export class TestEnv {
  private readonly suffix = randomUUID().replaceAll('-', '').slice(0, 12);
  private readonly tables: string[] = [];
  private readonly siblings: Array<IdempotencyStore<SqlClient>> = [];

  constructor(readonly under: StoreUnderTest) {}

  get store(): IdempotencyStore<SqlClient> {
    return this.under.store;
  }

  get sql(): SqlDialect {
    return this.under.sql ?? POSTGRES_DIALECT;
  }

  /** DDL where the dialect runs it (outside store transactions on MySQL), else in a store transaction. */
  async ddl(statement: string): Promise<void> {
    if (this.sql.ddl) await this.sql.ddl(statement);
    else await this.store.transaction((tx) => tx.query(statement));
  }

  consumer(label: string): string {
    return `${label}-${this.suffix}`;
  }

  key(messageId: string, consumerLabel = 'conformance'): MessageKey {
    return { consumer: this.consumer(consumerLabel), messageId };
  }

  /** Another store on the same schema, or the same store when the factory has none. */
  async sibling(): Promise<IdempotencyStore<SqlClient>> {
    if (!this.under.sibling) return this.store;
    const store = await this.under.sibling();
    this.siblings.push(store);
    return store;
  }

  /**
   * A business table written through `tx`. Without `unique`, nothing stops a second row
   * per ID: a doubled effect shows up in the counts.
   */
  async effectsTable(options: { unique?: boolean } = {}): Promise<EffectsTable> {
    const base = `effects_${this.suffix}_${this.tables.length}`;
    const { quote } = this.sql;
    const name = this.under.schema ? `${quote(this.under.schema)}.${quote(base)}` : quote(base);
    const key = options.unique ? ' PRIMARY KEY' : '';
    await this.ddl(`CREATE TABLE ${name} (message_id ${this.sql.types.key} NOT NULL${key})`);
    this.tables.push(name);
    return new EffectsTable(this.store, name, this.sql);
  }

  /**
   * Which of `ids` have no marker for `consumer`, found by claiming them in a transaction
   * that is then rolled back (the probe leaves nothing behind).
   */
  async unclaimed(consumer: string, ids: string[]): Promise<string[]> {
    let claimed: string[] = [];
    await this.store
      .transaction(async (tx) => {
        claimed = [...(await this.store.claim(tx, consumer, ids))].sort();
        throw new RollbackProbe();
      })
      .catch((error: unknown) => {
        if (!(error instanceof RollbackProbe)) throw error;
      });
    return claimed;
  }

  async close(passed: boolean): Promise<void> {
    try {
      for (const store of this.siblings) await store.close();
      if (passed && !this.under.schema) {
        for (const table of this.tables) await this.ddl(`DROP TABLE IF EXISTS ${table}`);
      }
    } finally {
      await this.under.cleanup({ passed });
    }
  }
}

export class EffectsTable {
  constructor(
    private readonly store: IdempotencyStore<SqlClient>,
    readonly name: string,
    private readonly sql: SqlDialect,
  ) {}

  async insert(tx: SqlClient, messageId: string): Promise<void> {
    await tx.query(`INSERT INTO ${this.name} (message_id) VALUES (${this.sql.param(1)})`, [messageId]);
  }

  async count(messageId: string): Promise<number> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ n: number }>(
        `SELECT ${this.sql.count} AS n FROM ${this.name} WHERE message_id = ${this.sql.param(1)}`,
        [messageId],
      ),
    );
    return Number(rows[0]?.n ?? 0);
  }

  async total(): Promise<number> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ n: number }>(`SELECT ${this.sql.count} AS n FROM ${this.name}`),
    );
    return Number(rows[0]?.n ?? 0);
  }

  async perId(): Promise<Map<string, number>> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ message_id: string; n: number }>(
        `SELECT message_id, ${this.sql.count} AS n FROM ${this.name} GROUP BY message_id`,
      ),
    );
    return new Map(rows.map((row) => [row.message_id, Number(row.n)]));
  }
}

/** Thrown inside a transaction to roll it back on purpose. */
export class RollbackProbe extends Error {
  constructor() {
    super('rolled back on purpose by the conformance suite');
  }
}

export function acquired(claim: LeaseClaim | undefined): Extract<LeaseClaim, { status: 'acquired' }> {
  expect(claim?.status).toBe('acquired');
  return claim as Extract<LeaseClaim, { status: 'acquired' }>;
}
