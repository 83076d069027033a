import { ConfigError } from '@oncely/core';
import { HttpIdempotencyError } from './errors.js';

/**
 * The deterministic key for a call no transaction covers: `${consumer}:${messageId}:${step}`,
 * the same value `ctx.idempotencyKey(step)` returns inside a consumer. For `processOnce`
 * users, who have no `ctx`.
 *
 * @example
 * ```ts
 * await processOnce(store, { consumer: 'payments', messageId: event.id }, async (tx) => {
 *   await provider.charge({ idempotencyKey: idempotencyKey('payments', event.id, 'charge') });
 * });
 * ```
 */
export function idempotencyKey(consumer: string, messageId: string, step: string): string {
  for (const [field, value] of [
    ['consumer', consumer],
    ['messageId', messageId],
    ['step', step],
  ] as const) {
    if (typeof value !== 'string' || value.trim() === '') {
      throw new ConfigError(
        `idempotencyKey ${field}`,
        `must be a non-empty string; got ${JSON.stringify(value)}`,
      );
    }
  }
  return `${consumer}:${messageId}:${step}`;
}

/**
 * Options of {@link idempotentFetch}.
 *
 * @example
 * ```ts
 * const options: IdempotentFetchOptions = { retries: 5, initialDelayMs: 100 };
 * ```
 */
export interface IdempotentFetchOptions {
  /** Retries after the first try (network errors and retryable statuses). @default 3 */
  retries?: number;
  /** First retry delay; doubles per retry, with jitter. A `Retry-After` header wins. @default 200 */
  initialDelayMs?: number;
  /** Longest delay between tries. @default 5000 */
  maxDelayMs?: number;
  /**
   * Which statuses are retried with the same key. 409 is the provider saying the first
   * try with this key is still in progress.
   * @default 408, 409, 425, 429 and every 5xx
   */
  retryOn?: (status: number) => boolean;
  /** The header the key travels in. @default 'Idempotency-Key' */
  header?: string;
  /** The fetch to call. @default globalThis.fetch */
  fetch?: typeof fetch;
}

const defaultRetryOn = (status: number): boolean =>
  status === 408 || status === 409 || status === 425 || status === 429 || status >= 500;

/**
 * `fetch` that sends `key` as the `Idempotency-Key` header and retries network errors and
 * retryable statuses with the same key, so the provider applies the call once however
 * many tries reach it. The body must be replayable (string, bytes, `URLSearchParams`,
 * `FormData`, `Blob`); a stream cannot be sent twice and is refused. The last response
 * (or network error) is returned (or thrown) when the retries run out. `init.signal`
 * aborts the tries and the waits between them.
 *
 * @example
 * ```ts
 * handler: async (message, ctx) => {
 *   const response = await idempotentFetch(ctx.idempotencyKey('charge'), 'https://psp.example/charges', {
 *     method: 'POST',
 *     headers: { 'content-type': 'application/json' },
 *     body: JSON.stringify({ amount: 40 }),
 *     signal: ctx.signal,
 *   });
 * }
 * ```
 */
export async function idempotentFetch(
  key: string,
  input: string | URL | Request,
  init: RequestInit = {},
  options: IdempotentFetchOptions = {},
): Promise<Response> {
  if (typeof key !== 'string' || key.trim() === '') {
    throw new ConfigError('idempotentFetch key', `must be a non-empty string; got ${JSON.stringify(key)}`);
  }
  if (input instanceof Request) {
    throw new HttpIdempotencyError(
      'HTTP_OUTBOUND_BODY',
      'idempotentFetch needs a URL and an init, not a Request: a Request body can be read only once',
    );
  }
  if (init.body instanceof ReadableStream) {
    throw new HttpIdempotencyError(
      'HTTP_OUTBOUND_BODY',
      'idempotentFetch cannot retry a ReadableStream body; pass a string, bytes or a Blob',
    );
  }
  const retries = options.retries ?? 3;
  const initialDelayMs = options.initialDelayMs ?? 200;
  const maxDelayMs = options.maxDelayMs ?? 5000;
  const retryOn = options.retryOn ?? defaultRetryOn;
  const doFetch = options.fetch ?? globalThis.fetch;
  const headers = new Headers(init.headers);
  headers.set(options.header ?? 'Idempotency-Key', key);
  for (let attempt = 0; ; attempt++) {
    let response: Response | undefined;
    try {
      response = await doFetch(input, { ...init, headers });
    } catch (error) {
      // An abort is the caller's decision, not a network failure.
      if (init.signal?.aborted || attempt >= retries) throw error;
    }
    if (response && (attempt >= retries || !retryOn(response.status))) return response;
    const backoff = Math.min(maxDelayMs, initialDelayMs * 2 ** attempt) * (1 + Math.random() * 0.2);
    const delay = Math.min(maxDelayMs, retryAfterMs(response) ?? backoff);
    // The body is dropped, so the connection can be reused.
    await response?.body?.cancel().catch(() => {});
    await sleep(delay, init.signal ?? undefined);
  }
}

function retryAfterMs(response: Response | undefined): number | undefined {
  const value = response?.headers.get('retry-after');
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
