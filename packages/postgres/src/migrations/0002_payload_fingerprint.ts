/**
 * 0002_payload_fingerprint: a nullable fingerprint of the payload on the processed
 * marker, written only by consumers with `payloadFingerprint` (and `processOnce` calls
 * given one). Nullable with no default: PostgreSQL adds it without rewriting the table,
 * and markers written before it (or without the option) keep NULL, which never
 * mismatches.
 *
 * `{{schema}}` stands for the validated, quoted schema name. Forward-only.
 */
export const statements: readonly string[] = [
  `ALTER TABLE {{schema}}.processed_messages ADD COLUMN fingerprint text`,
];
