import { LeaseLostError, OncelyError, type OncelyErrorCode } from '@oncely/core';

/**
 * Stable code of {@link ServiceBusOperationError}.
 *
 * @example
 * ```ts
 * if ((error as { code?: string }).code === SERVICEBUS_OPERATION_FAILED) console.warn('Service Bus call failed');
 * ```
 */
export const SERVICEBUS_OPERATION_FAILED = 'SERVICEBUS_OPERATION_FAILED' as OncelyErrorCode;

/** Service Bus error codes (`ServiceBusError.code`) that mean a lock no longer holds the message. */
const LOCK_LOST_CODES = new Set(['MessageLockLost', 'SessionLockLost']);

/**
 * A Service Bus call for one message failed for a reason other than a lost lock
 * (`ServiceTimeout`, `ServiceBusy`, a closed connection...). The settlement rejects with
 * it, so the core logs and counts it (`ackFailed`); the outcome may be unknown
 * (`ServiceTimeout`): the store's marker absorbs a redelivery.
 *
 * `code` is `'SERVICEBUS_OPERATION_FAILED'`; `serviceBusCode` is the SDK's code.
 *
 * @example
 * ```ts
 * consumer.on('ackFailed', (e) => {
 *   if (e.error instanceof ServiceBusOperationError) console.warn(e.error.operation, e.error.serviceBusCode);
 * });
 * ```
 */
export class ServiceBusOperationError extends OncelyError {
  constructor(
    readonly operation: string,
    readonly serviceBusCode: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(
      SERVICEBUS_OPERATION_FAILED,
      `Service Bus ${operation} failed (${serviceBusCode}): ${message}`,
      options,
    );
  }
}

/**
 * The SDK's error code (`ServiceBusError.code`, e.g. `MessageLockLost`), never the text.
 *
 * @example
 * ```ts
 * if (serviceBusErrorCode(error) === 'ServiceTimeout') console.warn('outcome unknown');
 * ```
 */
export function serviceBusErrorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && code !== '' ? code : undefined;
}

/**
 * True when Service Bus says the message (or session) lock is gone: it expired, the
 * message was settled already, or the session receiver's link is gone.
 *
 * @example
 * ```ts
 * isLockLostError({ code: 'MessageLockLost' }); // true
 * ```
 */
export function isLockLostError(error: unknown): boolean {
  return LOCK_LOST_CODES.has(serviceBusErrorCode(error) ?? '');
}

/**
 * Maps a settlement or renewal failure to what the core expects: a lost lock becomes
 * {@link LeaseLostError} (the core stops renewing, counts `ackFailed`, never a second
 * effect); anything else keeps its cause inside a {@link ServiceBusOperationError}.
 *
 * @example
 * ```ts
 * throw toSettlementError('completeMessage', error);
 * ```
 */
export function toSettlementError(operation: string, error: unknown): Error {
  if (isLockLostError(error)) {
    return new LeaseLostError(`Service Bus ${operation}: the lock is lost (${serviceBusErrorCode(error)})`, {
      cause: error,
    });
  }
  if (error instanceof OncelyError) return error;
  return new ServiceBusOperationError(
    operation,
    serviceBusErrorCode(error) ?? 'Unknown',
    String((error as { message?: unknown } | null)?.message ?? error),
    { cause: error },
  );
}
