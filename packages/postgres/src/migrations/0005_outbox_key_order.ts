/**
 * 0005_outbox_key_order: per-key order is commit order.
 *
 * `(xid, position)` is the writing transactions' start order: under contention PostgreSQL
 * can give a row lock to a later transaction, so a transaction that waited for another's
 * commit (and read its result) can still hold the smaller xid, and its row went out first.
 * Now a keyed write first locks the key's row in `outbox_keys` (an upsert: writers of one
 * key serialise on it until they commit) and only then takes `key_seq` from one sequence.
 * Whoever takes a key's number after another did waited for that one's commit, so a key's
 * `key_seq` order is its commit order; the relay sends a key's rows by it. A row with a
 * `key_seq` is also never passed over by a later commit, so keyed rows need not wait for
 * the snapshot's xmin. Unkeyed rows take no lock and no number.
 *
 * `outbox_keys` rows carry no state (the number comes from the sequence), so a row not
 * locked by a writer can be deleted at any time: prune removes those unused for longer
 * than its window. Rows written before this migration have no `key_seq` and go first, in
 * `(xid, position)` order as before.
 */
export const statements: readonly string[] = [
  `CREATE TABLE {{schema}}.outbox_keys (
    key     text        PRIMARY KEY,
    used_at timestamptz NOT NULL DEFAULT now()
  )`,
  `CREATE SEQUENCE {{schema}}.outbox_key_seq`,
  `ALTER TABLE {{schema}}.outbox ADD COLUMN key_seq bigint`,
  `CREATE INDEX outbox_pending_key_seq_idx ON {{schema}}.outbox (key, key_seq NULLS FIRST, xid, position)
    WHERE status = 'pending' AND key IS NOT NULL`,
];
