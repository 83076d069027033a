import type { IdempotencyStore, Logger, SqlClient } from '@oncely/core';
import type { Problems } from './problems.js';
import type { HttpQueries } from './schema.js';
import type { IdempotencyDecision, StoredResponse } from './types.js';

/** What the state machine of either mode needs of the {@link HttpIdempotency} it serves. */
export interface KeyContext {
  store: IdempotencyStore<SqlClient>;
  queries: HttpQueries;
  schema: string;
  storeFailures: boolean;
  retentionMs: number;
  leaseMs: number;
  handlerTimeoutMs: number;
  problems: Problems;
  log: Logger;
  /** The response headers kept with a stored response, as JSON. */
  storedHeaders(response: StoredResponse): string;
}

/** The key a request asks for, in its scope, with the request's fingerprint. */
export interface KeyRequest {
  scope: string;
  key: string;
  fingerprint: string;
}

/** A key's row as `lockAndPeek` and `read` return it. */
export interface KeyRow {
  fingerprint: string;
  status: 'in_progress' | 'completed';
  live: boolean;
  response_status: number | null;
  response_headers: Record<string, string | string[]> | string | null;
  response_body: Uint8Array | null;
}

export function respond(response: StoredResponse): IdempotencyDecision {
  return { kind: 'respond', response, replayed: false };
}

/** A completed key's stored response, sent again. */
export function replay(row: KeyRow): IdempotencyDecision {
  const headers =
    typeof row.response_headers === 'string'
      ? JSON.parse(row.response_headers)
      : (row.response_headers ?? {});
  return {
    kind: 'respond',
    replayed: true,
    response: {
      status: row.response_status ?? 200,
      headers,
      body: Buffer.from(row.response_body ?? new Uint8Array()),
    },
  };
}

/** A promise and its resolver; resolving twice keeps the first value. */
export function deferred<T>(): { promise: Promise<T>; resolve(value: T): void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
