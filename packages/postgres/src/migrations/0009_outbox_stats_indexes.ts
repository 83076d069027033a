/**
 * 0009_outbox_stats_indexes: the outbox counts (`store.outbox.stats()`, which the relay's
 * gauges run at every metric collection under a 5 s statement timeout) read pending and
 * failed rows only, but no index held the failed ones, nor the pending ones by age: the
 * query scanned the whole table, sent rows included, which pile up until pruned. On a big
 * table the timeout fired at every collection and the gauges had no point. Two partial
 * indexes hold only those rows (a few, while the relay keeps up), so the counts and the
 * oldest pending row cost what is pending or failed, not the table. Building them reads
 * the table once and blocks writes to it meanwhile (a plain CREATE INDEX, in the
 * migration's transaction).
 */
export const statements: readonly string[] = [
  `CREATE INDEX outbox_pending_created_idx ON {{schema}}.outbox (created_at) WHERE status = 'pending'`,
  `CREATE INDEX outbox_failed_created_idx ON {{schema}}.outbox (created_at) WHERE status = 'failed'`,
];
