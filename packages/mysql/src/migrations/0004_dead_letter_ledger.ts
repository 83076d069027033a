/**
 * 0004_dead_letter_ledger: what became of each dead letter of a log-based dead-letter queue
 * (Kafka), as `@oncely/postgres` migration 0010: `replaying`, `replayed` or `discarded`,
 * keyed by the letter's position (`partition_no`: PARTITION is reserved in MySQL). Times
 * are DATETIME(6) in UTC.
 */
export const statements: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS {{schema}}.dead_letter_ledger (
    consumer         VARBINARY(800)  NOT NULL,
    queue            VARBINARY(255)  NOT NULL,
    partition_no     INT             NOT NULL,
    dlq_offset       BIGINT          NOT NULL,
    fingerprint      VARCHAR(128)    NOT NULL,
    state            VARCHAR(16)     NOT NULL,
    message_id       VARBINARY(2048) NULL,
    target_topic     VARBINARY(255)  NULL,
    target_partition INT             NULL,
    target_from      BIGINT          NULL,
    target_offset    BIGINT          NULL,
    at               DATETIME(6)     NOT NULL,
    PRIMARY KEY (consumer, queue, partition_no, dlq_offset),
    CONSTRAINT dead_letter_ledger_state CHECK (state IN ('replaying', 'replayed', 'discarded'))
  ) ENGINE=InnoDB`,
];
