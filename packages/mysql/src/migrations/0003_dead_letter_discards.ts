/**
 * 0003_dead_letter_discards: what operators discarded from a dead-letter queue (`oncely dlq
 * discard`, `DeadLetters.discard`), written before the broker copy is removed, so `oncely
 * inspect` can later tell that a message was thrown away, by whom, when and why (as
 * `@oncely/postgres` migration 0006). Keys are VARBINARY like the markers' (0001); a message
 * without an ID has a NULL `message_id`. Times are DATETIME(6) in UTC.
 */
export const statements: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS {{schema}}.dead_letter_discards (
    id           BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer     VARBINARY(800)  NOT NULL,
    message_id   VARBINARY(2048) NULL,
    reason       VARCHAR(255)    NOT NULL,
    error        TEXT            NULL,
    discarded_by VARCHAR(255)    NOT NULL,
    discarded_at DATETIME(6)     NOT NULL,
    KEY dead_letter_discards_message_idx (consumer, message_id(255))
  ) ENGINE=InnoDB`,
];
