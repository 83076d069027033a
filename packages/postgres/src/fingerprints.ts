import type { FingerprintStore, MessageKey, SqlClient } from '@oncely/core';

/**
 * The payload-fingerprint statements (migration 0002). Kept apart from the plain claim
 * statements in `queries.ts`: a consumer without `payloadFingerprint` never runs them,
 * so its hot path is unchanged.
 */
export interface FingerprintQueries {
  /** $1 consumer, $2 message ID, $3 fingerprint (or null). Returns the ID when inserted. */
  readonly claimOne: string;
  /** $1 consumer, $2 text[] of sorted unique IDs, $3 text[] of their fingerprints (same order). */
  readonly claim: string;
  /** $1 consumer, $2 text[] of IDs: the fingerprints stored on their markers. */
  readonly read: string;
  /** `completeLease` ($1 consumer, $2 ID, $3 owner, $4 result JSON) that also sets $5 fingerprint. */
  readonly completeLease: string;
}

/**
 * Builds the fingerprint statements for one schema.
 *
 * @param s the schema name, already validated and quoted (`"oncely"`)
 */
export function buildFingerprintQueries(s: string): FingerprintQueries {
  const markers = `${s}.processed_messages`;
  return {
    claimOne: `INSERT INTO ${markers} (consumer, message_id, status, fingerprint)
      VALUES ($1, $2, 'completed', $3)
      ON CONFLICT (consumer, message_id) DO NOTHING
      RETURNING message_id`,
    // WITH ORDINALITY keeps the sorted order, so two batches sharing IDs lock them alike.
    claim: `INSERT INTO ${markers} (consumer, message_id, status, fingerprint)
      SELECT $1, e.id, 'completed', e.fingerprint
      FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS e(id, fingerprint, n)
      ORDER BY e.n
      ON CONFLICT (consumer, message_id) DO NOTHING
      RETURNING message_id`,
    read: `SELECT message_id, fingerprint FROM ${markers}
      WHERE consumer = $1 AND message_id = ANY($2::text[]) AND fingerprint IS NOT NULL`,
    // As the plain completeLease: idempotent for its owner, the first result and
    // fingerprint kept on a retried completion.
    completeLease: `UPDATE ${markers}
      SET status = 'completed', locked_until = NULL,
        result = CASE WHEN status = 'in_progress' THEN $4::text::jsonb ELSE result END,
        fingerprint = CASE WHEN status = 'in_progress' THEN $5 ELSE fingerprint END,
        processed_at = CASE WHEN status = 'in_progress' THEN now() ELSE processed_at END
      WHERE consumer = $1 AND message_id = $2 AND owner = $3 AND status IN ('in_progress', 'completed')
      RETURNING 1 AS completed`,
  };
}

/** What the fingerprint side borrows from its `PostgresStore`. */
export interface FingerprintStoreDeps {
  /** The store's own short transaction (schema check, error marking). */
  run<T>(operation: string, work: (client: SqlClient) => Promise<T>): Promise<T>;
  /** The store's JSON encoding of a leased result. */
  toJson(result: unknown): string;
}

/**
 * The `PostgresStore.fingerprints` side: claims that store a fingerprint, and the read a
 * duplicate compares against. Used by the core for `payloadFingerprint` consumers and by
 * `processOnce(..., { fingerprint })`.
 *
 * @example
 * ```ts
 * const fingerprints = createFingerprintStore(buildFingerprintQueries('"oncely"'), { run, toJson });
 * ```
 */
export function createFingerprintStore(
  queries: FingerprintQueries,
  deps: FingerprintStoreDeps,
): FingerprintStore<SqlClient> {
  return {
    async claim(tx, consumer, entries) {
      const ids = [...entries.keys()].sort();
      if (ids.length === 0) return new Set();
      const { rows } =
        ids.length === 1
          ? await tx.query<{ message_id: string }>(queries.claimOne, [consumer, ids[0], entries.get(ids[0]!)])
          : await tx.query<{ message_id: string }>(queries.claim, [
              consumer,
              ids,
              ids.map((id) => entries.get(id) ?? null),
            ]);
      return new Set(rows.map((row) => row.message_id));
    },
    async read(consumer, messageIds, tx) {
      if (messageIds.length === 0) return new Map();
      const select = async (client: SqlClient) => {
        const { rows } = await client.query<{ message_id: string; fingerprint: string }>(queries.read, [
          consumer,
          [...new Set(messageIds)],
        ]);
        return new Map(rows.map((row) => [row.message_id, row.fingerprint]));
      };
      return tx ? select(tx) : deps.run('fingerprints.read()', select);
    },
    completeLease(key: MessageKey, owner: string, result: unknown, fingerprint: string) {
      const json = deps.toJson(result);
      return deps.run('fingerprints.completeLease()', async (client) => {
        const { rows } = await client.query(queries.completeLease, [
          key.consumer,
          key.messageId,
          owner,
          json,
          fingerprint,
        ]);
        return rows.length === 1;
      });
    },
  };
}
