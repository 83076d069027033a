/**
 * Every runtime statement of the store, in one place, built once per store from the
 * validated, backtick-quoted database name; values always travel as `?` parameters.
 * Times are the database's UTC clock (UTC_TIMESTAMP(6)), never the session time zone.
 *
 * No statement depends on how the connection counts affected rows: mysql2 connects with
 * CLIENT_FOUND_ROWS by default (an UPDATE that matches but changes nothing reports 1), a
 * pool of yours may not. Where the answer matters, the statement either always changes
 * what it matches, or a second statement settles it.
 */
export interface MySqlQueries {
  /** consumer, message ID: the single-message claim; ER_DUP_ENTRY (1062) means a duplicate. */
  readonly claimOne: string;
  /** consumer, then `count` message IDs: inserts them all; fails whole (1062) when one exists. */
  claimMany(count: number): string;
  /**
   * consumer, IDs (expanded): the markers that exist, read with a shared lock. A locking
   * read sees the latest committed row at any isolation level (a plain read under
   * REPEATABLE READ would keep its old snapshot, and the claim loop would not end).
   */
  readonly existing: string;
  /** consumer, IDs (expanded): deletes completed markers claimed in this transaction. */
  readonly unclaim: string;
  /**
   * consumer, message ID, run. The new count comes back as the statement's insert ID
   * (LAST_INSERT_ID(expr) on the update path; 0, meaning 1, on the insert path).
   */
  readonly recordAttempt: string;
  /** consumer, message ID, run, run. */
  readonly forgetAttempt: string;
  /** consumer, message ID. */
  readonly clearAttempts: string;
  /** consumer, message ID, lease µs, owner: a new in-progress claim (1062 when a row exists). */
  readonly insertLease: string;
  /** consumer, message ID: the row an acquire ran into, locked. */
  readonly readLeaseForUpdate: string;
  /** lease µs, owner, consumer, message ID: takes over an expired claim. */
  readonly takeOverLease: string;
  /** lease µs, consumer, message ID, owner. */
  readonly renewLease: string;
  /** result JSON, consumer, message ID, owner. */
  readonly completeLease: string;
  /** consumer, message ID, owner: whether `owner` already completed it (a retried completion). */
  readonly completedBy: string;
  /** consumer, message ID, owner. */
  readonly releaseLease: string;
  /**
   * offset, consumer, topic, partition, offset. Advances next_offset to offset + 1 only when
   * the stored value is <= offset; a match always changes the row, so affected rows answer
   * the same with or without CLIENT_FOUND_ROWS. Under READ COMMITTED a wait for a competing
   * owner re-reads the row before the WHERE is applied (semi-consistent read).
   */
  readonly advanceOffset: string;
  /** consumer, topic, partition, offset: the first record of a partition (1062 when the row exists). */
  readonly insertOffset: string;
  /** consumer, topic. */
  readonly readOffsets: string;
  /** ms: the database's UTC now minus that many ms, as 'YYYY-MM-DD hh:mm:ss.ffffff' (`cutoff`). */
  readonly cutoff: string;
  /** cutoff [, consumer], batch size: completed markers to prune, locked, skipping rows others hold. */
  prunableMarkers(withConsumer: boolean): string;
  /**
   * (consumer, message ID) × count: the rows a prune batch locked, each reached by its
   * primary key (a derived table of the keys drives an eq_ref join). Not `WHERE
   * (consumer, message_id) IN (...)` nor `consumer = ? AND message_id IN (...)`: the
   * optimizer may scan for those (it did on MariaDB 10.11), and a DELETE's scan waits on
   * every row it meets, also those the batch skipped because a claim holds them.
   */
  deleteMarkers(count: number): string;
  /** cutoff [, consumer]: how many completed markers would be pruned (`n`). */
  countPrunableMarkers(withConsumer: boolean): string;
  /** cutoff [, consumer], batch size: attempt counters not touched since the cutoff. */
  prunableAttempts(withConsumer: boolean): string;
  deleteAttempts(count: number): string;
  /** database name: 1 row when it exists. */
  readonly schemaExists: string;
  /** database name, table name: 1 row when the table exists. */
  readonly tableExists: string;
  readonly createSchema: string;
  readonly createMigrationsTable: string;
  readonly readMigrationVersions: string;
  /** version, name. */
  readonly insertMigration: string;
  /** lock name, seconds: 1 when `migrate()`'s named lock was taken. */
  readonly getLock: string;
  /** lock name. */
  readonly releaseLock: string;
}

const NOW = 'UTC_TIMESTAMP(6)';

/**
 * Builds the store's statements for one database.
 *
 * @param s the database name, already validated and quoted (`` `oncely` ``)
 */
export function buildQueries(s: string): MySqlQueries {
  const markers = `${s}.processed_messages`;
  const attempts = `${s}.attempts`;
  return {
    claimOne: `INSERT INTO ${markers} (consumer, message_id, status, processed_at) VALUES (?, ?, 'completed', ${NOW})`,
    claimMany: (count) =>
      `INSERT INTO ${markers} (consumer, message_id, status, processed_at) VALUES ${Array.from(
        { length: count },
        () => `(?, ?, 'completed', ${NOW})`,
      ).join(', ')}`,
    existing: `SELECT message_id FROM ${markers} WHERE consumer = ? AND message_id IN (?) LOCK IN SHARE MODE`,
    unclaim: `DELETE FROM ${markers} WHERE consumer = ? AND message_id IN (?) AND status = 'completed'`,
    // attempts is assigned first, so it reads the old last_run. attempts = 0 only ever
    // follows a take-back, which clears last_run: the update path never yields 0, so an
    // insert ID of 0 always means "inserted" (count 1).
    recordAttempt: `INSERT INTO ${attempts} (consumer, message_id, attempts, last_run, updated_at)
      VALUES (?, ?, 1, ?, ${NOW})
      ON DUPLICATE KEY UPDATE
        attempts = LAST_INSERT_ID(attempts + IF(VALUES(last_run) IS NOT NULL AND last_run <=> VALUES(last_run), 0, 1)),
        last_run = VALUES(last_run), updated_at = VALUES(updated_at)`,
    forgetAttempt: `UPDATE ${attempts} SET attempts = attempts - 1, last_run = NULL, updated_at = ${NOW}
      WHERE consumer = ? AND message_id = ? AND attempts > 0 AND (? IS NULL OR last_run = ?)`,
    clearAttempts: `DELETE FROM ${attempts} WHERE consumer = ? AND message_id = ?`,
    insertLease: `INSERT INTO ${markers} (consumer, message_id, status, locked_until, owner, processed_at)
      VALUES (?, ?, 'in_progress', ${NOW} + INTERVAL ? MICROSECOND, ?, ${NOW})`,
    // remaining_us: the claim's time left on the database clock, so callers can wait it out
    // on their own clock without mixing the two.
    readLeaseForUpdate: `SELECT status, owner, result,
        GREATEST(0, TIMESTAMPDIFF(MICROSECOND, ${NOW}, locked_until)) AS remaining_us,
        locked_until <= ${NOW} AS expired
      FROM ${markers} WHERE consumer = ? AND message_id = ? FOR UPDATE`,
    takeOverLease: `UPDATE ${markers}
      SET locked_until = ${NOW} + INTERVAL ? MICROSECOND, owner = ?, result = NULL, processed_at = ${NOW}
      WHERE consumer = ? AND message_id = ? AND status = 'in_progress' AND locked_until <= ${NOW}`,
    renewLease: `UPDATE ${markers} SET locked_until = ${NOW} + INTERVAL ? MICROSECOND
      WHERE consumer = ? AND message_id = ? AND owner = ? AND status = 'in_progress'`,
    // status last: MySQL applies SET assignments left to right.
    completeLease: `UPDATE ${markers}
      SET result = ?, processed_at = ${NOW}, locked_until = NULL, status = 'completed'
      WHERE consumer = ? AND message_id = ? AND owner = ? AND status = 'in_progress'`,
    completedBy: `SELECT 1 AS done FROM ${markers}
      WHERE consumer = ? AND message_id = ? AND owner = ? AND status = 'completed'`,
    releaseLease: `DELETE FROM ${markers}
      WHERE consumer = ? AND message_id = ? AND owner = ? AND status = 'in_progress'`,
    advanceOffset: `UPDATE ${s}.offsets SET next_offset = CAST(? AS SIGNED) + 1, updated_at = ${NOW}
      WHERE consumer = ? AND topic = ? AND partition_no = ? AND next_offset <= CAST(? AS SIGNED)`,
    insertOffset: `INSERT INTO ${s}.offsets (consumer, topic, partition_no, next_offset, updated_at)
      VALUES (?, ?, ?, CAST(? AS SIGNED) + 1, ${NOW})`,
    readOffsets: `SELECT partition_no, CAST(next_offset AS CHAR) AS next_offset FROM ${s}.offsets
      WHERE consumer = ? AND topic = ?`,
    cutoff: `SELECT DATE_FORMAT(${NOW} - INTERVAL ? MICROSECOND, '%Y-%m-%d %H:%i:%s.%f') AS cutoff`,
    prunableMarkers: (withConsumer) => `SELECT consumer, message_id FROM ${markers}
      WHERE processed_at < ? AND status = 'completed'${withConsumer ? ' AND consumer = ?' : ''}
      ORDER BY processed_at LIMIT ? FOR UPDATE SKIP LOCKED`,
    deleteMarkers: (count) => deleteByKeys(markers, count),
    countPrunableMarkers: (withConsumer) => `SELECT COUNT(*) AS n FROM ${markers}
      WHERE processed_at < ? AND status = 'completed'${withConsumer ? ' AND consumer = ?' : ''}`,
    prunableAttempts: (withConsumer) => `SELECT consumer, message_id FROM ${attempts}
      WHERE updated_at < ?${withConsumer ? ' AND consumer = ?' : ''}
      ORDER BY updated_at LIMIT ? FOR UPDATE SKIP LOCKED`,
    deleteAttempts: (count) => deleteByKeys(attempts, count),
    schemaExists: 'SELECT 1 AS present FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
    tableExists:
      'SELECT 1 AS present FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?',
    createSchema: `CREATE DATABASE IF NOT EXISTS ${s} CHARACTER SET utf8mb4`,
    // Not `migrations`: the database may be the application's own, where ORMs such as
    // TypeORM keep a table of that name.
    createMigrationsTable: `CREATE TABLE IF NOT EXISTS ${s}.oncely_migrations (
      version    INT          NOT NULL PRIMARY KEY,
      name       VARCHAR(200) NOT NULL,
      applied_at DATETIME(6)  NOT NULL
    ) ENGINE=InnoDB`,
    readMigrationVersions: `SELECT version FROM ${s}.oncely_migrations ORDER BY version`,
    insertMigration: `INSERT INTO ${s}.oncely_migrations (version, name, applied_at) VALUES (?, ?, ${NOW})`,
    getLock: 'SELECT GET_LOCK(?, ?) AS locked',
    releaseLock: 'SELECT RELEASE_LOCK(?) AS released',
  };
}

/** DELETE of `count` rows by their exact (consumer, message_id), driven by a derived table of the keys. */
function deleteByKeys(table: string, count: number): string {
  const keys = Array.from({ length: count }, (_, i) =>
    i === 0 ? 'SELECT ? AS c, ? AS m' : 'SELECT ?, ?',
  ).join(' UNION ALL ');
  return `DELETE t FROM (${keys}) AS doomed STRAIGHT_JOIN ${table} AS t
    ON t.consumer = doomed.c AND t.message_id = doomed.m`;
}
