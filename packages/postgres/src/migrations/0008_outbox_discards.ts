/**
 * 0008_outbox_discards: an operator can discard a dead-lettered outbox row for good
 * (`oncely outbox --discard`, `store.outbox.discard()`). The row is kept, body and last
 * error included, under the status `discarded` with who discarded it and when: the record
 * lives with the row it is about, and the relay, `retry()` and the counts pass it over
 * (they read `pending` or `failed` rows only). `dead_letter_discards` (0006) is per
 * consumer, which an outbox row is not.
 */
export const statements: readonly string[] = [
  // 0003 declared the CHECK inline, so PostgreSQL named it outbox_status_check.
  `ALTER TABLE {{schema}}.outbox DROP CONSTRAINT outbox_status_check`,
  `ALTER TABLE {{schema}}.outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('pending', 'sent', 'failed', 'discarded'))`,
  `ALTER TABLE {{schema}}.outbox ADD COLUMN discarded_by text, ADD COLUMN discarded_at timestamptz`,
];
