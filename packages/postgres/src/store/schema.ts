import type { SqlClient } from '@oncely/core';
import { SchemaVersionError } from '../errors.js';
import { LATEST_VERSION, MIGRATIONS } from '../migrations/index.js';
import type { StoreQueries } from '../queries.js';
import type { StoreCore } from './StoreCore.js';

/**
 * What {@link PostgresStore.migrate} did.
 *
 * @example
 * ```ts
 * const { applied, version } = await store.migrate();
 * ```
 */
export interface MigrateResult {
  /** Names of the migrations this call applied (empty when the schema was up to date). */
  applied: string[];
  /** The schema version now. */
  version: number;
}

/** Names the key in `(class, key)` advisory locks taken by `migrate()`: ASCII "once". */
const MIGRATION_LOCK_CLASS = 0x6f6e6365;

/** PostgresStore.migrate(): see its documentation. */
export async function migrate(this: StoreCore): Promise<MigrateResult> {
  const q = this.queries;
  const applied = await this.run(
    'migrate()',
    async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1::integer, hashtext($2::text))', [
        MIGRATION_LOCK_CLASS,
        this.schema,
      ]);
      // Checked first so a role without CREATE on the database can migrate a schema an
      // administrator created for it.
      if (!(await present(client, q.schemaExists, this.schema))) await client.query(q.createSchema);
      if (!(await present(client, q.tableExists, q.migrationsRegclass)))
        await client.query(q.createMigrationsTable);
      const applied = await readVersions(client, q);
      const newest = Math.max(0, ...applied);
      if (newest > LATEST_VERSION) throw new SchemaVersionError(this.schema, newest, LATEST_VERSION);
      // Every migration not yet recorded, not only those above the newest: a database
      // migrated by a build that shipped a later number first still gets the earlier one.
      const pending = MIGRATIONS.filter((migration) => !applied.has(migration.version));
      for (const migration of pending) {
        await client.query(q.insertMigration, [migration.version, migration.name]);
        for (const statement of migration.statements) {
          await client.query(statement.replaceAll('{{schema}}', this.quotedSchema));
        }
      }
      return pending.map((migration) => migration.name);
    },
    // DDL may wait for running store transactions; the advisory lock waits for other migrators.
    { verify: false, lockTimeoutMs: undefined },
  );
  this.schemaVerified = true;
  return { applied, version: LATEST_VERSION };
}

/**
 * Refuses a schema that is missing, behind, or migrated by a newer version of this
 * package. Checked once per store; a failure is checked again next time (someone may
 * migrate meanwhile).
 */
export async function verifySchema(this: StoreCore, client: SqlClient): Promise<void> {
  const q = this.queries;
  const applied = (await present(client, q.tableExists, q.migrationsRegclass))
    ? await readVersions(client, q)
    : new Set<number>();
  const version = schemaVersion(applied);
  if (version !== LATEST_VERSION) throw new SchemaVersionError(this.schema, version, LATEST_VERSION);
  this.schemaVerified = true;
}

async function present(client: SqlClient, sql: string, name: string): Promise<boolean> {
  const { rows } = await client.query<{ present: boolean }>(sql, [name]);
  return rows[0]?.present === true;
}

async function readVersions(client: SqlClient, q: StoreQueries): Promise<Set<number>> {
  const { rows } = await client.query<{ version: number }>(q.readMigrationVersions);
  return new Set(rows.map((row) => Number(row.version)));
}

/**
 * The version a schema is usable at: its newest migration when that is newer than this
 * package knows, else the last of this package's migrations before the first one missing.
 */
function schemaVersion(applied: ReadonlySet<number>): number {
  const newest = Math.max(0, ...applied);
  if (newest > LATEST_VERSION) return newest;
  let version = 0;
  for (const migration of MIGRATIONS) {
    if (!applied.has(migration.version)) break;
    version = migration.version;
  }
  return version;
}
