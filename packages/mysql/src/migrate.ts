import type { SqlClient } from '@oncely/core';
import type { MySqlDriver, RawConnection } from './drivers/MySqlDriver.js';
import { MySqlSchemaVersionError } from './errors.js';
import { quoteSchemaName } from './identifiers.js';
import { MIGRATIONS, MYSQL_LATEST_VERSION } from './migrations/index.js';
import type { MySqlMigrateResult } from './options.js';
import type { MySqlQueries } from './queries.js';

/** How long `migrate()` waits for another migrator's named lock, in seconds. */
const MIGRATION_LOCK_WAIT_SECONDS = 120;

/** Applies pending migrations under the named lock; see `MySqlStore.migrate`. */
export async function migrate(
  driver: MySqlDriver,
  schema: string,
  q: MySqlQueries,
): Promise<MySqlMigrateResult> {
  const lock = `oncely_migrate:${schema}`;
  const applied = await driver.session(async (raw) => {
    const { rows } = await raw.query<{ locked: number | null }>(q.getLock, [
      lock,
      MIGRATION_LOCK_WAIT_SECONDS,
    ]);
    if (Number(rows[0]?.locked) !== 1) {
      throw new Error(
        `migrate(): another migrate() of \`${schema}\` held the lock ${lock} for ${MIGRATION_LOCK_WAIT_SECONDS} s`,
      );
    }
    try {
      // Checked first so a user without CREATE on the server can migrate a database an
      // administrator created for it.
      if ((await raw.query(q.schemaExists, [schema])).rows.length === 0) await raw.query(q.createSchema);
      await raw.query(q.createMigrationsTable);
      const versions = await readVersions(raw, q);
      const newest = Math.max(0, ...versions);
      if (newest > MYSQL_LATEST_VERSION)
        throw new MySqlSchemaVersionError(schema, newest, MYSQL_LATEST_VERSION);
      const pending = MIGRATIONS.filter((migration) => !versions.has(migration.version));
      for (const migration of pending) {
        for (const statement of migration.statements) {
          await raw.query(statement.replaceAll('{{schema}}', quoteSchemaName(schema)));
        }
        await raw.query(q.insertMigration, [migration.version, migration.name]);
      }
      return pending.map((migration) => migration.name);
    } finally {
      await raw.query(q.releaseLock, [lock]).catch(() => {});
    }
  });
  return { applied, version: MYSQL_LATEST_VERSION };
}

/** Refuses a schema that is missing, behind, or migrated by a newer version of this package. */
export async function verifySchema(connection: SqlClient, schema: string, q: MySqlQueries): Promise<void> {
  const present = (await connection.query(q.tableExists, [schema, 'oncely_migrations'])).rows.length > 0;
  const versions = present ? await readVersions(connection, q) : new Set<number>();
  const version = schemaVersion(versions);
  if (version !== MYSQL_LATEST_VERSION)
    throw new MySqlSchemaVersionError(schema, version, MYSQL_LATEST_VERSION);
}

async function readVersions(connection: RawConnection | SqlClient, q: MySqlQueries): Promise<Set<number>> {
  const { rows } = await connection.query<{ version: number }>(q.readMigrationVersions);
  return new Set(rows.map((row) => Number(row.version)));
}

/** The version a schema is usable at (see @oncely/postgres: numbers may have gaps). */
export function schemaVersion(applied: ReadonlySet<number>): number {
  const newest = Math.max(0, ...applied);
  if (newest > MYSQL_LATEST_VERSION) return newest;
  let version = 0;
  for (const migration of MIGRATIONS) {
    if (!applied.has(migration.version)) break;
    version = migration.version;
  }
  return version;
}
