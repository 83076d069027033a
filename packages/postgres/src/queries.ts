/**
 * Every runtime statement of the store, in one place. Each is built once per store from
 * the validated, quoted schema name; values always travel as parameters. Statements that
 * change rows return a row per change, so counting works through clients that report
 * rows but no row count (the caller-transaction mode).
 */
export interface StoreQueries {
  /**
   * $1 consumer, $2 text[] of sorted unique IDs. Inserts in array order, so two batches
   * lock shared IDs in the same order and cannot deadlock each other. An ID whose row is
   * held by an open transaction waits for it (READ COMMITTED): commit ⇒ conflict ⇒ not
   * returned; rollback ⇒ we insert it.
   */
  readonly claim: string;
  /** $1 consumer, $2 one message ID: the single-message claim, without unnest. Returns it when inserted. */
  readonly claimOne: string;
  /** $1 consumer, $2 message IDs: deletes completed markers claimed in this transaction. */
  readonly unclaim: string;
  /** $1 consumer, $2 message ID. Returns the new count. */
  readonly recordAttempt: string;
  readonly forgetAttempt: string;
  /** $1 consumer, $2 message ID: drops the counter of a message whose marker committed. */
  readonly clearAttempts: string;
  /**
   * $1 consumer, $2 message ID, $3 lease ms, $4 owner token. Inserts an `in_progress`
   * claim, or takes over one whose deadline passed, in one statement (database time).
   * Returns nothing when the row is completed or still held.
   */
  readonly acquireLease: string;
  /** $1 consumer, $2 message ID: the row an unsuccessful acquire ran into. */
  readonly readLease: string;
  /** $1 consumer, $2 message ID, $3 owner, $4 lease ms. */
  readonly renewLease: string;
  /** $1 consumer, $2 message ID, $3 owner, $4 result as JSON text. */
  readonly completeLease: string;
  /** $1 consumer, $2 message ID, $3 owner. */
  readonly releaseLease: string;
  /**
   * $1 consumer, $2 topic, $3 partition, $4 offset. Advances next_offset to offset + 1
   * only when the stored value is <= offset; under READ COMMITTED the WHERE is re-checked
   * after waiting for a competing owner, so two owners cannot both apply a record.
   */
  readonly advanceOffset: string;
  /** $1 consumer, $2 topic. */
  readonly readOffsets: string;
  /**
   * $1 cutoff, $2 batch size [, $3 consumer]. Completed markers only, oldest first, over
   * the processed_at index; rows another transaction holds are skipped, not waited for.
   */
  pruneMarkers(withConsumer: boolean): string;
  /** $1 cutoff [, $2 consumer]: how many completed markers `pruneMarkers` would delete (`n`). */
  countPrunableMarkers(withConsumer: boolean): string;
  /** $1 cutoff, $2 batch size [, $3 consumer]. Attempt counters not touched since the cutoff. */
  pruneAttempts(withConsumer: boolean): string;
  /** `'"schema".migrations'`, for to_regclass. */
  readonly migrationsRegclass: string;
  /** $1 schema name (unquoted). */
  readonly schemaExists: string;
  /** $1 regclass text: true when that table exists. */
  readonly tableExists: string;
  readonly createSchema: string;
  readonly createMigrationsTable: string;
  /** Every applied migration's version. */
  readonly readMigrationVersions: string;
  /** $1 version, $2 name. */
  readonly insertMigration: string;
}

const MS = `* interval '1 millisecond'`;

/**
 * Builds the store's statements for one schema.
 *
 * @param s the schema name, already validated and quoted (`"oncely"`)
 */
export function buildQueries(s: string): StoreQueries {
  const markers = `${s}.processed_messages`;
  return {
    claim: `INSERT INTO ${markers} (consumer, message_id, status)
      SELECT $1, id, 'completed' FROM unnest($2::text[]) AS ids(id)
      ON CONFLICT (consumer, message_id) DO NOTHING
      RETURNING message_id`,
    claimOne: `INSERT INTO ${markers} (consumer, message_id, status) VALUES ($1, $2, 'completed')
      ON CONFLICT (consumer, message_id) DO NOTHING
      RETURNING message_id`,
    unclaim: `DELETE FROM ${markers} WHERE consumer = $1 AND message_id = ANY($2::text[]) AND status = 'completed'`,
    // The count commits without waiting for the WAL flush: set_config(..., true) turns
    // synchronous_commit off for this statement's own (autocommit) transaction only. What
    // the count guards against is a consumer process that dies mid-run, and a commit the
    // server acknowledged survives that; only a PostgreSQL crash within about
    // 3 × wal_writer_delay may lose it, and then the message gets one run more than
    // maxAttempts. The handler's commit, later in the WAL, waits for its own flush, which
    // covers this record too. The subquery is referenced so the planner evaluates it.
    // $3, the run's token (or NULL): the run counted last is not counted again (its count
    // sent again after a lost answer); NULL never matches, so a call without one counts.
    recordAttempt: `INSERT INTO ${s}.attempts AS a (consumer, message_id, attempts, last_run)
      SELECT $1::text, $2::text, 1, $3::text FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait
      ON CONFLICT (consumer, message_id) DO UPDATE
        SET attempts = a.attempts + CASE WHEN a.last_run = EXCLUDED.last_run THEN 0 ELSE 1 END,
            last_run = EXCLUDED.last_run, updated_at = now()
      RETURNING a.attempts`,
    // With a run ($3): only while it is the run counted last, and once (last_run cleared).
    forgetAttempt: `UPDATE ${s}.attempts SET attempts = attempts - 1, last_run = NULL, updated_at = now()
      WHERE consumer = $1 AND message_id = $2 AND attempts > 0 AND ($3::text IS NULL OR last_run = $3::text)`,
    // Housekeeping after the marker committed, so no flush wait either (as recordAttempt):
    // a row this loses is only kept until retention prunes it. The subquery is referenced
    // so the planner evaluates it.
    clearAttempts: `DELETE FROM ${s}.attempts
      WHERE consumer = $1 AND message_id = $2
        AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`,
    acquireLease: `INSERT INTO ${markers} AS m (consumer, message_id, status, locked_until, owner)
      VALUES ($1, $2, 'in_progress', now() + $3::double precision ${MS}, $4)
      ON CONFLICT (consumer, message_id) DO UPDATE
        SET locked_until = EXCLUDED.locked_until, owner = EXCLUDED.owner, result = NULL, processed_at = now()
        WHERE m.status = 'in_progress' AND m.locked_until <= now()
      RETURNING m.locked_until, (m.xmax = 0) AS inserted`,
    // remaining_ms: the claim's time left on the database clock, so callers can wait it out
    // on their own clock without mixing the two.
    readLease: `SELECT status, locked_until, result,
        greatest(0, extract(epoch FROM (locked_until - now())) * 1000)::double precision AS remaining_ms
      FROM ${markers} WHERE consumer = $1 AND message_id = $2`,
    renewLease: `UPDATE ${markers} SET locked_until = now() + $4::double precision ${MS}
      WHERE consumer = $1 AND message_id = $2 AND owner = $3 AND status = 'in_progress'
      RETURNING 1 AS renewed`,
    // Idempotent for its owner: a retry after a lost answer finds the row completed and
    // succeeds without touching the stored result.
    completeLease: `UPDATE ${markers}
      SET status = 'completed', locked_until = NULL,
        result = CASE WHEN status = 'in_progress' THEN $4::text::jsonb ELSE result END,
        processed_at = CASE WHEN status = 'in_progress' THEN now() ELSE processed_at END
      WHERE consumer = $1 AND message_id = $2 AND owner = $3 AND status IN ('in_progress', 'completed')
      RETURNING 1 AS completed`,
    releaseLease: `DELETE FROM ${markers}
      WHERE consumer = $1 AND message_id = $2 AND owner = $3 AND status = 'in_progress'
      RETURNING 1 AS released`,
    advanceOffset: `INSERT INTO ${s}.offsets AS o (consumer, topic, partition, next_offset)
      VALUES ($1, $2, $3::integer, $4::bigint + 1)
      ON CONFLICT (consumer, topic, partition) DO UPDATE
        SET next_offset = EXCLUDED.next_offset, updated_at = now()
        WHERE o.next_offset <= $4::bigint
      RETURNING 1 AS advanced`,
    readOffsets: `SELECT partition, next_offset::text AS next_offset FROM ${s}.offsets
      WHERE consumer = $1 AND topic = $2`,
    pruneMarkers: (withConsumer) => `WITH doomed AS (
        SELECT consumer, message_id FROM ${markers}
        WHERE processed_at < $1 AND status = 'completed'${withConsumer ? ' AND consumer = $3' : ''}
        ORDER BY processed_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${markers} AS m USING doomed
      WHERE m.consumer = doomed.consumer AND m.message_id = doomed.message_id
      RETURNING 1 AS pruned`,
    countPrunableMarkers: (withConsumer) =>
      `SELECT count(*)::int AS n FROM ${markers}
        WHERE processed_at < $1 AND status = 'completed'${withConsumer ? ' AND consumer = $2' : ''}`,
    pruneAttempts: (withConsumer) => `WITH doomed AS (
        SELECT consumer, message_id FROM ${s}.attempts
        WHERE updated_at < $1${withConsumer ? ' AND consumer = $3' : ''}
        ORDER BY updated_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${s}.attempts AS a USING doomed
      WHERE a.consumer = doomed.consumer AND a.message_id = doomed.message_id
      RETURNING 1 AS pruned`,
    migrationsRegclass: `${s}.migrations`,
    schemaExists: 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1) AS present',
    tableExists: 'SELECT to_regclass($1) IS NOT NULL AS present',
    createSchema: `CREATE SCHEMA IF NOT EXISTS ${s}`,
    createMigrationsTable: `CREATE TABLE IF NOT EXISTS ${s}.migrations (
      version    integer     PRIMARY KEY,
      name       text        NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`,
    readMigrationVersions: `SELECT version FROM ${s}.migrations ORDER BY version`,
    insertMigration: `INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`,
  };
}
