/**
 * 0002_http_idempotency_keys: the table of `@oncely/http`'s `Idempotency-Key`s (see
 * `src/httpKeys.ts`), in the store's database so a key commits with the handler's writes.
 *
 * Scope and key are VARBINARY, compared byte by byte, as the markers' keys are (0001): a
 * collation would make `Order-1` and `order-1`, or `k` and `k `, one key, and a second
 * client request would be answered with the first one's response. 1024 + 1024 bytes stay
 * under InnoDB's 3072-byte index key limit. The fingerprint and the stored headers (JSON
 * text) are bytes too, so no database character set can alter them; the body is bytes.
 * Times are DATETIME(6) in UTC, written with UTC_TIMESTAMP(6).
 */
export const statements: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS {{schema}}.http_idempotency_keys (
    scope            VARBINARY(1024) NOT NULL,
    idempotency_key  VARBINARY(1024) NOT NULL,
    fingerprint      BLOB            NOT NULL,
    status           VARCHAR(16)     NOT NULL,
    owner            VARCHAR(64)     NULL,
    locked_until     DATETIME(6)     NULL,
    response_status  INT             NULL,
    response_headers LONGBLOB        NULL,
    response_body    LONGBLOB        NULL,
    created_at       DATETIME(6)     NOT NULL,
    expires_at       DATETIME(6)     NOT NULL,
    PRIMARY KEY (scope, idempotency_key),
    KEY http_idempotency_keys_expires_at_idx (expires_at),
    CONSTRAINT http_idempotency_keys_status_check CHECK (status IN ('in_progress', 'completed'))
  ) ENGINE=InnoDB`,
];
