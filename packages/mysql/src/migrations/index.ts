import { statements as init } from './0001_init.js';
import { statements as httpKeys } from './0002_http_idempotency_keys.js';
import { statements as deadLetterDiscards } from './0003_dead_letter_discards.js';
import { statements as deadLetterLedger } from './0004_dead_letter_ledger.js';

/** One forward-only migration. */
export interface MySqlMigration {
  /** Its number: applied in ascending order, recorded in `<schema>.oncely_migrations`. */
  version: number;
  name: string;
  /** Statements with `{{schema}}` standing for the quoted database name; each may run again. */
  statements: readonly string[];
}

/** Every migration this package ships, in order (TypeScript modules, so they ship inside `dist`). */
export const MIGRATIONS: readonly MySqlMigration[] = [
  { version: 1, name: '0001_init', statements: init },
  { version: 2, name: '0002_http_idempotency_keys', statements: httpKeys },
  { version: 3, name: '0003_dead_letter_discards', statements: deadLetterDiscards },
  { version: 4, name: '0004_dead_letter_ledger', statements: deadLetterLedger },
];

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
