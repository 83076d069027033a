/**
 * Every outbox statement, in one place, built once per store from the validated, quoted
 * schema name; values always travel as parameters.
 */
export interface OutboxQueries {
  /** $1 id, $2 destination, $3 key, $4 body bytea, $5 attributes JSON text. Idempotent on id. */
  readonly write: string;
  /**
   * $1 limit. Pending rows every writer of which has ended (xid below the snapshot's
   * xmin), due now, in (xid, position) order, locked; rows another relay holds are
   * skipped, not waited for.
   */
  readonly claim: string;
  /**
   * $1 text[] keys, $2 limit per key. The first pending rows of each key, in order,
   * locked by anyone or not: a relay sends a key's rows only while they are the key's
   * head, so a row held by another relay (or waiting out its backoff) holds the later ones.
   */
  readonly keyHeads: string;
  /**
   * After a claim that was not full: whether pending rows exist that are not yet below
   * xmin, and in how many ms the next row waiting out a backoff is due.
   */
  readonly pendingState: string;
  /** $1 bigint[] positions. */
  readonly markSent: string;
  /** $1 bigint[] positions, $2 text[] errors, $3 float8[] delays ms, $4 bool[] dead-letter. */
  readonly markFailed: string;
  /** Pending and failed counts, and the oldest pending row's age in ms (null: none). */
  readonly stats: string;
  /** $1 limit. Failed rows, and pending rows that failed at least once, oldest first. */
  readonly stuck: string;
  /** $1 text[] ids, or null for every failed row. Back to pending with a fresh count. */
  readonly retry: string;
  /** $1 cutoff, $2 batch size. Sent rows sent before the cutoff, oldest first. */
  readonly pruneSent: string;
}

const MS = `* interval '1 millisecond'`;
const BELOW_XMIN = 'xid < pg_snapshot_xmin(pg_current_snapshot())';

export function buildOutboxQueries(s: string): OutboxQueries {
  const t = `${s}.outbox`;
  return {
    write: `INSERT INTO ${t} (id, destination, key, body, attributes)
      VALUES ($1, $2, $3, $4, $5::text::jsonb)
      ON CONFLICT (id) DO NOTHING`,
    // Ordered by the table's columns (o.), not the text alias of the same name.
    claim: `SELECT o.position::text AS position, o.id, o.destination, o.key, o.body, o.attributes, o.attempts
      FROM ${t} AS o
      WHERE o.status = 'pending' AND o.${BELOW_XMIN}
        AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
      ORDER BY o.xid, o.position
      LIMIT $1
      FOR UPDATE SKIP LOCKED`,
    keyHeads: `SELECT key, position::text AS position FROM (
        SELECT key, position, row_number() OVER (PARTITION BY key ORDER BY xid, position) AS rank
        FROM ${t}
        WHERE status = 'pending' AND key = ANY($1::text[])
      ) heads
      WHERE rank <= $2
      ORDER BY key, rank`,
    pendingState: `SELECT
        EXISTS (SELECT 1 FROM ${t} WHERE status = 'pending' AND NOT (${BELOW_XMIN})) AS unsettled,
        (SELECT greatest(0, extract(epoch FROM (min(next_attempt_at) - now())) * 1000)::double precision
          FROM ${t} WHERE status = 'pending' AND next_attempt_at > now()) AS next_due_ms`,
    markSent: `UPDATE ${t}
      SET status = 'sent', sent_at = now(), attempts = attempts + 1, next_attempt_at = NULL, last_error = NULL
      WHERE position = ANY($1::bigint[])
      RETURNING 1 AS sent`,
    markFailed: `UPDATE ${t} AS o
      SET attempts = o.attempts + 1,
        last_error = f.error,
        status = CASE WHEN f.dead THEN 'failed' ELSE 'pending' END,
        next_attempt_at = CASE WHEN f.dead THEN NULL ELSE now() + f.delay_ms ${MS} END
      FROM unnest($1::bigint[], $2::text[], $3::double precision[], $4::boolean[]) AS f(position, error, delay_ms, dead)
      WHERE o.position = f.position
      RETURNING 1 AS failed`,
    stats: `SELECT
        count(*) FILTER (WHERE status = 'pending')::integer AS pending,
        count(*) FILTER (WHERE status = 'failed')::integer AS failed,
        (extract(epoch FROM (now() - min(created_at) FILTER (WHERE status = 'pending'))) * 1000)::double precision
          AS oldest_pending_ms
      FROM ${t} WHERE status IN ('pending', 'failed')`,
    stuck: `SELECT id, destination, key, status, attempts, last_error, created_at, next_attempt_at
      FROM ${t}
      WHERE status = 'failed' OR (status = 'pending' AND attempts > 0)
      ORDER BY xid, position
      LIMIT $1`,
    retry: `UPDATE ${t}
      SET status = 'pending', attempts = 0, next_attempt_at = NULL, last_error = NULL
      WHERE status = 'failed' AND ($1::text[] IS NULL OR id = ANY($1::text[]))
      RETURNING id`,
    pruneSent: `WITH doomed AS (
        SELECT position FROM ${t}
        WHERE status = 'sent' AND sent_at < $1
        ORDER BY sent_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${t} AS o USING doomed
      WHERE o.position = doomed.position
      RETURNING 1 AS pruned`,
  };
}
