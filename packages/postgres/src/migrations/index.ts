import { statements as init } from './0001_init.js';
import { statements as payloadFingerprint } from './0002_payload_fingerprint.js';
import { statements as outbox } from './0003_outbox.js';
import { statements as attemptRun } from './0004_attempt_run.js';
import { statements as outboxKeyOrder } from './0005_outbox_key_order.js';
import { statements as deadLetterDiscards } from './0006_dead_letter_discards.js';
import { statements as outboxFailingKeys } from './0007_outbox_failing_keys.js';
import { statements as outboxDiscards } from './0008_outbox_discards.js';
import { statements as outboxStatsIndexes } from './0009_outbox_stats_indexes.js';
import { statements as deadLetterLedger } from './0010_dead_letter_ledger.js';

/** One forward-only migration. */
export interface Migration {
  /** Its number: applied in ascending order, recorded in `<schema>.migrations`. */
  version: number;
  name: string;
  /** Statements with `{{schema}}` standing for the quoted schema name. */
  statements: readonly string[];
}

/**
 * Every migration this package ships, in order. They are TypeScript modules (not loose
 * `.sql` files) so they ship inside `dist` whatever builds the package.
 */
export const MIGRATIONS: readonly Migration[] = [
  { version: 1, name: '0001_init', statements: init },
  { version: 2, name: '0002_payload_fingerprint', statements: payloadFingerprint },
  { version: 3, name: '0003_outbox', statements: outbox },
  { version: 4, name: '0004_attempt_run', statements: attemptRun },
  { version: 5, name: '0005_outbox_key_order', statements: outboxKeyOrder },
  { version: 6, name: '0006_dead_letter_discards', statements: deadLetterDiscards },
  { version: 7, name: '0007_outbox_failing_keys', statements: outboxFailingKeys },
  { version: 8, name: '0008_outbox_discards', statements: outboxDiscards },
  { version: 9, name: '0009_outbox_stats_indexes', statements: outboxStatsIndexes },
  { version: 10, name: '0010_dead_letter_ledger', statements: deadLetterLedger },
];

/**
 * The schema version this package works with: the number of its newest migration. A
 * schema is current when every migration above is applied (numbers may have gaps).
 *
 * @example
 * ```ts
 * const { version } = await store.migrate();
 * console.log(version === LATEST_VERSION); // true
 * ```
 */
export const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;
