/**
 * 0004_attempt_run: a nullable `last_run` on the attempts counter, the token of the run it
 * counted last. A count sent again for the same run (its commit landed, its answer was
 * lost, the consumer sent it again after the outage) is not counted twice, and a run's
 * take-back only removes that run's count. Nullable with no default: PostgreSQL adds it
 * without rewriting the table; rows written before it keep NULL, which never matches a
 * run, so they count as before.
 *
 * `{{schema}}` stands for the validated, quoted schema name. Forward-only.
 */
export const statements: readonly string[] = [`ALTER TABLE {{schema}}.attempts ADD COLUMN last_run text`];
