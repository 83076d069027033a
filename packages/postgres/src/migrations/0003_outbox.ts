/**
 * 0003_outbox: the transactional outbox (`ctx.publish`, `publishInTransaction`, the relay).
 *
 * Numbered 3, not 2: version 2 belongs to another change, and `migrate()` applies every
 * version the schema lacks (not only those above its highest), so this migration works
 * whether version 2 was applied before it, after it, or not at all. It depends on
 * nothing but 0001.
 *
 * `xid` is the writing transaction's ID (`pg_current_xact_id()`, the column default).
 * The relay reads only rows whose `xid` is below `pg_snapshot_xmin(pg_current_snapshot())`:
 * every transaction that could still add a row ordered before them has ended, so a row
 * that commits late is never passed over (a `position > last seen` cursor would skip it:
 * identity values are taken before commit). Order is `(xid, position)`.
 *
 * The statement trigger wakes relays (`LISTEN oncely_outbox`, the payload is the schema
 * name); notifications are delivered at commit, and never for a rollback.
 */
export const statements: readonly string[] = [
  `CREATE TABLE {{schema}}.outbox (
    position        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              text        NOT NULL UNIQUE,
    destination     text        NOT NULL,
    key             text,
    body            bytea       NOT NULL,
    attributes      jsonb       NOT NULL DEFAULT '{}',
    xid             xid8        NOT NULL DEFAULT pg_current_xact_id(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error      text,
    sent_at         timestamptz
  )`,
  `CREATE INDEX outbox_pending_idx ON {{schema}}.outbox (xid, position) WHERE status = 'pending'`,
  `CREATE INDEX outbox_pending_key_idx ON {{schema}}.outbox (key, xid, position) WHERE status = 'pending' AND key IS NOT NULL`,
  `CREATE INDEX outbox_sent_at_idx ON {{schema}}.outbox (sent_at) WHERE status = 'sent'`,
  `CREATE FUNCTION {{schema}}.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    PERFORM pg_notify('oncely_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
  END
  $$`,
  `CREATE TRIGGER outbox_notify AFTER INSERT ON {{schema}}.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.outbox_notify()`,
];
