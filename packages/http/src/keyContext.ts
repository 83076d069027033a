import type { HttpKeyRecord, HttpKeyStore, IdempotencyStore, Logger, SqlClient } from '@oncely/core';
import type { Problems } from './problems.js';
import type { IdempotencyDecision, StoredResponse } from './types.js';

/** What the state machine of either mode needs of the {@link HttpIdempotency} it serves. */
export interface KeyContext {
  store: IdempotencyStore<SqlClient>;
  /** The store's statements on the keys table. */
  keys: HttpKeyStore<SqlClient>;
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

export function respond(response: StoredResponse): IdempotencyDecision {
  return { kind: 'respond', response, replayed: false };
}

/** A completed key's stored response, sent again. */
export function replay(record: HttpKeyRecord): IdempotencyDecision {
  const headers = record.responseHeaders === null ? {} : JSON.parse(record.responseHeaders);
  return {
    kind: 'respond',
    replayed: true,
    response: {
      status: record.responseStatus ?? 200,
      headers,
      body: Buffer.from(record.responseBody ?? new Uint8Array()),
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
