import { OncelyError } from '@oncely/core';

/**
 * Stable codes of `@oncely/http` errors. Never match on message text.
 * - `HTTP_OUTBOUND_BODY`: `idempotentFetch` got a body it cannot send twice.
 * - `HTTP_TRANSACTION_ENDED`: `req.tx` used after the request's transaction ended.
 * - `HTTP_RESPONSE_SENT`: a write's callback, when the handler wrote after its response
 *   was already answered (the 504 of `handlerTimeoutMs`, or after its own end).
 */
export type HttpIdempotencyErrorCode = 'HTTP_OUTBOUND_BODY' | 'HTTP_TRANSACTION_ENDED' | 'HTTP_RESPONSE_SENT';

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
