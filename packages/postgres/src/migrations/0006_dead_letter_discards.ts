/**
 * 0006_dead_letter_discards: what operators discarded from a dead-letter queue (`oncely dlq
 * discard`, `DeadLetters.discard`), written before the broker copy is removed, so
 * `oncely inspect` can later tell that a message was thrown away, by whom, when and why.
 * A message without an ID (`missing-id`) is recorded with a NULL `message_id`. A discard
 * interrupted after its record and run again records the message a second time.
 */
export const statements: readonly string[] = [
  `CREATE TABLE {{schema}}.dead_letter_discards (
    id           bigserial   PRIMARY KEY,
    consumer     text        NOT NULL,
    message_id   text,
    reason       text        NOT NULL,
    error        text,
    discarded_by text        NOT NULL,
    discarded_at timestamptz NOT NULL
  )`,
  `CREATE INDEX dead_letter_discards_message_idx ON {{schema}}.dead_letter_discards (consumer, message_id)`,
];
