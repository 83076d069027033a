import { OncelyError } from '@oncely/core';

/**
 * Stable codes of `@oncely/http` errors. Never match on message text.
 * - `HTTP_OUTBOUND_BODY`: `idempotentFetch` got a body it cannot send twice.
 * - `HTTP_TRANSACTION_ENDED`: `req.tx` used after the request's transaction ended.
 * - `HTTP_RESPONSE_SENT`: a write's callback, when the handler wrote after its request
 *   was already answered (the 504 of `handlerTimeoutMs`, or after its own end).
 * - `HTTP_CLIENT_GONE`: the error `res.end`'s callback gets (node:http wrapper, Express)
 *   when the client disconnected before the response was sent: the callback still runs.
 * - `HTTP_HANDLER_TIMEOUT`: `req.idempotency.signal.reason` when `handlerTimeoutMs` passed.
 * - `HTTP_CLAIM_LOST`: `req.idempotency.signal.reason` when another request took the
 *   leased key over.
 */
export type HttpIdempotencyErrorCode =
  | 'HTTP_OUTBOUND_BODY'
  | 'HTTP_TRANSACTION_ENDED'
  | 'HTTP_RESPONSE_SENT'
  | 'HTTP_CLIENT_GONE'
  | 'HTTP_HANDLER_TIMEOUT'
  | 'HTTP_CLAIM_LOST';

/** The abort reason of `req.idempotency.signal` once `handlerTimeoutMs` has passed. */
export function handlerTimedOut(): HttpIdempotencyError {
  return new HttpIdempotencyError(
    'HTTP_HANDLER_TIMEOUT',
    'the request handler ran past handlerTimeoutMs; its request was answered 504',
  );
}

/**
 * Base class of the errors this package throws (an {@link OncelyError}, so
 * `isOncelyError(error, 'HTTP_OUTBOUND_BODY')` works across duplicate package copies).
 *
 * @example
 * ```ts
 * if (isOncelyError(error, 'HTTP_OUTBOUND_BODY')) console.error(error.message);
 * ```
 */
export class HttpIdempotencyError extends OncelyError {
  constructor(code: HttpIdempotencyErrorCode, message: string, options?: ErrorOptions) {
    super(code, message, options);
  }
}
