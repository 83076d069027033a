/**
 * 0001_init: the processed markers, the advisory attempt counters and the Kafka offsets.
 *
 * `{{schema}}` stands for the validated, quoted schema name. Forward-only: never edit a
 * released migration, add the next number instead. Kept as separate statements (not one
 * script) so they also run through clients that accept one statement per call (the
 * caller-transaction mode with Prisma, for example).
 *
 * No date partitioning of `processed_messages`: a partitioned table's unique key must
 * include the partition column, so a redelivery on a later day would land in another
 * partition and no longer conflict with its marker. Retention is `prune()` in batches
 * over the `processed_at` index instead.
 */
export const statements: readonly string[] = [
  `CREATE TABLE {{schema}}.processed_messages (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    status       text        NOT NULL DEFAULT 'completed' CHECK (status IN ('completed', 'in_progress')),
    locked_until timestamptz,
    owner        text,
    result       jsonb,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
  )`,
  `CREATE INDEX processed_messages_processed_at_idx ON {{schema}}.processed_messages (processed_at)`,
  `CREATE TABLE {{schema}}.attempts (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    attempts   integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
  )`,
  `CREATE INDEX attempts_updated_at_idx ON {{schema}}.attempts (updated_at)`,
  `CREATE TABLE {{schema}}.offsets (
    consumer    text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
  )`,
];
