/**
 * 0007_outbox_failing_keys: the relay's claim finds the keys whose head failed before (a
 * pending keyed row with `attempts > 0`, #26) on every round of every relay. Without an
 * index of its own that look-up read every pending keyed row: a backlog of 30,000 healthy
 * rows cost each claim ~520 buffers and ~15 ms, 70 times the claim itself, so draining a
 * backlog grew with its square. This partial index holds only the failing rows (none
 * while every send succeeds), so the look-up costs what is failing, not what is pending.
 */
export const statements: readonly string[] = [
  `CREATE INDEX outbox_failing_key_idx ON {{schema}}.outbox (key)
    WHERE status = 'pending' AND key IS NOT NULL AND attempts > 0`,
];
