import { OncelyError } from '@oncely/core';

/**
 * Stable codes of `@oncely/http` errors. Never match on message text.
 */
export type HttpIdempotencyErrorCode = 'HTTP_OUTBOUND_BODY' | 'HTTP_TRANSACTION_ENDED';

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
