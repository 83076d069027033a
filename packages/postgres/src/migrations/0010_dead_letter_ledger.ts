/**
 * 0010_dead_letter_ledger: what became of each dead letter of a log-based dead-letter queue
 * (Kafka), which cannot forget a record: `replaying` (a re-send was about to be made, its
 * target partition's end offset in `target_from`), `replayed` (the source holds the copy)
 * or `discarded` (after its `dead_letter_discards` record). Keyed by the letter's position;
 * `fingerprint` ties a row to the record it was written for, so a recreated topic's record
 * at the same offset does not match. Rows below a partition's log start are pruned.
 */
export const statements: readonly string[] = [
  `CREATE TABLE {{schema}}.dead_letter_ledger (
    consumer         text        NOT NULL,
    queue            text        NOT NULL,
    partition        integer     NOT NULL,
    dlq_offset       bigint      NOT NULL,
    fingerprint      text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('replaying', 'replayed', 'discarded')),
    message_id       text,
    target_topic     text,
    target_partition integer,
    target_from      bigint,
    target_offset    bigint,
    at               timestamptz NOT NULL,
    PRIMARY KEY (consumer, queue, partition, dlq_offset)
  )`,
];
