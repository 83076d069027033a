/**
 * Every outbox statement, in one place, built once per store from the validated, quoted
 * schema name; values always travel as parameters.
 */
export interface OutboxQueries {
  /**
   * $1 id, $2 destination, $3 key, $4 body bytea, $5 attributes JSON text. Idempotent on
   * id: returns a row when it inserted, none when the id was already there.
   */
  readonly write: string;
  /** $1 id. The message already stored under an id, to compare with a write that found it. */
  readonly written: string;
  /**
   * $1 limit. Pending rows every writer of which has ended (xid below the snapshot's
   * xmin), due now, in (xid, position) order, locked; rows another relay holds are
   * skipped, not waited for. A keyed row only when its key's head is due and no other
   * relay holds the key (its advisory lock, taken for the round): what is claimed of a
   * key is a prefix of its pending rows. Of a key whose head failed before, only that
   * head, once due, and such heads fill at most half the round: a parked or failing key's
   * backlog takes no room in the round.
   */
  readonly claim: string;
  /**
   * $1 text[] keys, $2 limit per key. The first pending rows of each key, in the key's
   * order (`key_seq`, then `(xid, position)` for rows written before it): what a round
   * claimed of a key is sent only as far as it continues this list (the claim's LIMIT can
   * cut a key's rows, which the claim orders by xid).
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
  /** Dead-lettered rows, oldest first. */
  readonly deadLettered: string;
  /** The same, locked: what `retry`/`discard` select from cannot change under them. */
  readonly deadLetteredForUpdate: string;
  /** $1 text[] ids, $2 who. Dead-lettered rows among them become `discarded`, stamped. */
  readonly discard: string;
  /** $1 limit. Discarded rows, the latest discard first. */
  readonly discarded: string;
  /** $1 cutoff, $2 batch size. Sent rows sent before the cutoff, oldest first. */
  readonly pruneSent: string;
  /**
   * $1 cutoff, $2 batch size. outbox_keys rows unused since the cutoff. They carry no
   * state (a key's number comes from the sequence after its row is locked), so any row
   * no writer holds may go; a writer's lock is skipped, not waited for.
   */
  readonly pruneKeys: string;
}

/** A SQL string literal of a (quoted) identifier. */
function lit(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

const MS = `* interval '1 millisecond'`;
const BELOW_XMIN = 'xid < pg_snapshot_xmin(pg_current_snapshot())';

export function buildOutboxQueries(s: string): OutboxQueries {
  const t = `${s}.outbox`;
  return {
    // A keyed row: the key's outbox_keys row locked first (held to commit), then its
    // number from the sequence (RETURNING runs after the lock), so a key's numbers follow
    // its commit order. Unkeyed: the CTE inserts nothing and locks nothing.
    write: `WITH k AS (
        INSERT INTO ${s}.outbox_keys (key) SELECT $3::text WHERE $3::text IS NOT NULL
        ON CONFLICT (key) DO UPDATE SET used_at = now()
        RETURNING nextval(${lit(`${s}.outbox_key_seq`)}::regclass) AS seq
      )
      INSERT INTO ${t} (id, destination, key, body, attributes, key_seq)
      VALUES ($1, $2, $3::text, $4, $5::text::jsonb, (SELECT seq FROM k))
      ON CONFLICT (id) DO NOTHING
      RETURNING 1 AS inserted`,
    written: `SELECT destination, key, body, attributes FROM ${t} WHERE id = $1`,
    // Ordered by the table's columns (o.), not the text alias of the same name. A keyed
    // row is claimed only when its key is sendable, decided here and not after the claim,
    // so one key's backlog never fills a round: this relay holds the key's advisory lock
    // for the round (taken, never waited for; another relay holding it is sending the
    // key), and the key is not troubled, or the row is its troubled key's due head.
    // A troubled key is one whose head failed before (only a key's head is ever sent, so
    // the pending rows with attempts > 0 are heads). Of such a key only the head is
    // claimed, and only once its backoff is over: the rows behind it could not be sent
    // before it succeeds, so they take no room in a round (#26: with many failing keys
    // each due again every round, each round had been one key's backlog and healthy rows
    // were never claimed). The due heads take at most half a round, longest waiting first,
    // so retries can never crowd out fresh rows either. The lock's first half is the
    // table's name hashed, so schemas do not share locks; a hash collision between two
    // keys only makes them take turns.
    // The troubled keys and their heads are found once per claim, from the rows that failed
    // (their own partial index, 0006: a healthy backlog is not read). Each row walked then
    // costs one probe of the hashed list of troubled keys (NOT IN a subquery, hashed), not a
    // look-up of its key's head, nor a comparison with every troubled key (`<> ALL (array)`
    // did that: 5 s a claim with 10,000 failing keys and 50,000 rows behind them).
    claim: `WITH tried AS (
        SELECT head.key, head.position, head.next_attempt_at
        FROM (SELECT DISTINCT key FROM ${t}
          WHERE status = 'pending' AND key IS NOT NULL AND attempts > 0) AS failed_key
        CROSS JOIN LATERAL (SELECT h.key, h.position, h.next_attempt_at FROM ${t} AS h
          WHERE h.status = 'pending' AND h.key = failed_key.key
          ORDER BY h.key_seq NULLS FIRST, h.xid, h.position LIMIT 1) AS head
      ), due_heads AS (
        SELECT position FROM tried
        WHERE next_attempt_at IS NULL OR next_attempt_at <= now()
        ORDER BY next_attempt_at NULLS FIRST, position
        LIMIT greatest(1, $1::bigint / 2)
      )
      SELECT o.position::text AS position, o.id, o.destination, o.key, o.body, o.attributes, o.attempts
      FROM ${t} AS o
      WHERE o.status = 'pending' AND (o.key_seq IS NOT NULL OR o.${BELOW_XMIN})
        AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
        AND (o.key IS NULL OR ((o.key NOT IN (SELECT key FROM tried) OR o.position IN (SELECT position FROM due_heads))
          AND pg_try_advisory_xact_lock(hashtext(${lit(t)}), hashtext(o.key))))
      ORDER BY o.xid, o.position
      LIMIT $1::bigint
      FOR UPDATE OF o SKIP LOCKED`,
    keyHeads: `SELECT key, position::text AS position FROM (
        SELECT key, position,
          row_number() OVER (PARTITION BY key ORDER BY key_seq NULLS FIRST, xid, position) AS rank
        FROM ${t}
        WHERE status = 'pending' AND key = ANY($1::text[])
      ) heads
      WHERE rank <= $2
      ORDER BY key, rank`,
    pendingState: `SELECT
        EXISTS (SELECT 1 FROM ${t} WHERE status = 'pending' AND key_seq IS NULL AND NOT (${BELOW_XMIN})) AS unsettled,
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
    // One subquery per status, each matching one partial index's predicate exactly (0009):
    // a single scan for both statuses (status IN (...)) has no index to use, and read the
    // whole table, sent rows included.
    stats: `SELECT
        (SELECT count(*) FROM ${t} WHERE status = 'pending')::integer AS pending,
        (SELECT count(*) FROM ${t} WHERE status = 'failed')::integer AS failed,
        (extract(epoch FROM (now() - (SELECT min(created_at) FROM ${t} WHERE status = 'pending'))) * 1000)::double precision
          AS oldest_pending_ms`,
    stuck: `SELECT id, destination, key, status, attempts, last_error, created_at, next_attempt_at
      FROM ${t}
      WHERE status = 'failed' OR (status = 'pending' AND attempts > 0)
      ORDER BY xid, position
      LIMIT $1`,
    retry: `UPDATE ${t}
      SET status = 'pending', attempts = 0, next_attempt_at = NULL, last_error = NULL
      WHERE status = 'failed' AND ($1::text[] IS NULL OR id = ANY($1::text[]))
      RETURNING id`,
    deadLettered: `SELECT id, destination, key, attempts, last_error, created_at
      FROM ${t} WHERE status = 'failed' ORDER BY xid, position`,
    deadLetteredForUpdate: `SELECT id, destination, key, attempts, last_error, created_at
      FROM ${t} WHERE status = 'failed' ORDER BY xid, position FOR UPDATE`,
    discard: `UPDATE ${t}
      SET status = 'discarded', discarded_by = $2, discarded_at = now(), next_attempt_at = NULL
      WHERE status = 'failed' AND id = ANY($1::text[])
      RETURNING id`,
    discarded: `SELECT id, destination, key, attempts, last_error, discarded_by, discarded_at
      FROM ${t} WHERE status = 'discarded' ORDER BY discarded_at DESC, position LIMIT $1`,
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
    pruneKeys: `DELETE FROM ${s}.outbox_keys
      WHERE key IN (
        SELECT key FROM ${s}.outbox_keys WHERE used_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED
      )
      RETURNING 1 AS pruned`,
  };
}
