/**
 * 0001_init: the processed markers (with the payload fingerprint), the advisory attempt
 * counters (with the token of the run counted last) and the Kafka offsets: what
 * `@oncely/postgres` reached in its migrations 0001, 0002 and 0004, in one step (this
 * store starts there). The outbox (postgres 0003) is not part of this store.
 *
 * `{{schema}}` stands for the validated, backtick-quoted database name. Forward-only.
 * MySQL commits every DDL statement on its own, so a migration is not atomic: each
 * statement is written to be run again (`IF NOT EXISTS`), and the version row is written
 * after the last one, so a migrate() cut short is finished by the next.
 *
 * Keys are VARBINARY: compared byte by byte. A character column's collation would make
 * `'Order-1'` and `'order-1'` (case-insensitive collations) or `'a'` and `'a '` (PAD
 * SPACE collations, utf8mb4_bin included on MariaDB) the same key, and one of two
 * different messages would be skipped as a duplicate. 800 + 2048 bytes stay under
 * InnoDB's 3072-byte index key limit. Times are DATETIME(6) in UTC, written with
 * UTC_TIMESTAMP(6) (never the session time zone). `result` is JSON text in LONGTEXT (MariaDB's JSON
 * is LONGTEXT too; MySQL's native JSON would come back parsed through some clients and as
 * text through others).
 */
export const statements: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS {{schema}}.processed_messages (
    consumer     VARBINARY(800)  NOT NULL,
    message_id   VARBINARY(2048) NOT NULL,
    status       VARCHAR(16)     NOT NULL DEFAULT 'completed',
    locked_until DATETIME(6)     NULL,
    owner        VARCHAR(64)     NULL,
    result       LONGTEXT        NULL,
    fingerprint  VARCHAR(255)    NULL,
    processed_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY processed_messages_processed_at_idx (processed_at),
    CONSTRAINT processed_messages_status_check CHECK (status IN ('completed', 'in_progress'))
  ) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS {{schema}}.attempts (
    consumer   VARBINARY(800)  NOT NULL,
    message_id VARBINARY(2048) NOT NULL,
    attempts   INT             NOT NULL,
    last_run   VARCHAR(64)     NULL,
    updated_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY attempts_updated_at_idx (updated_at)
  ) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS {{schema}}.offsets (
    consumer     VARBINARY(800)  NOT NULL,
    topic        VARBINARY(1024) NOT NULL,
    partition_no INT             NOT NULL,
    next_offset  BIGINT          NOT NULL,
    updated_at   DATETIME(6)     NOT NULL,
    PRIMARY KEY (consumer, topic, partition_no)
  ) ENGINE=InnoDB`,
];
