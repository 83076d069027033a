import { statements as init } from './0001_init.js';

/** One forward-only migration. */
export interface MySqlMigration {
  /** Its number: applied in ascending order, recorded in `<schema>.oncely_migrations`. */
  version: number;
  name: string;
  /** Statements with `{{schema}}` standing for the quoted database name; each may run again. */
  statements: readonly string[];
}

/** Every migration this package ships, in order (TypeScript modules, so they ship inside `dist`). */
export const MIGRATIONS: readonly MySqlMigration[] = [{ version: 1, name: '0001_init', statements: init }];

/**
 * The schema version this package works with: the number of its newest migration.
 *
 * @example
 * ```ts
 * const { version } = await store.migrate();
 * console.log(version === MYSQL_LATEST_VERSION); // true
 * ```
 */
export const MYSQL_LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;
