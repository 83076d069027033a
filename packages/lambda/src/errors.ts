import { OncelyError } from '@oncely/core';

/** Stable codes of `@oncely/lambda` errors. Never match on message text. */
export type LambdaErrorCode = 'LAMBDA_BATCH_FAILED' | 'LAMBDA_EVENT_INVALID';

/**
 * Thrown by a Kafka handler in `failureReport: 'throw'` mode when records failed: Lambda
 * retries the whole batch, and the records that committed are skipped as duplicates.
 *
 * @example
 * ```ts
 * if (isOncelyError(error, 'LAMBDA_BATCH_FAILED')) console.error(error.failed);
 * ```
 */
export class BatchFailedError extends OncelyError {
  constructor(
    readonly failed: readonly string[],
    options?: ErrorOptions,
  ) {
    super(
      'LAMBDA_BATCH_FAILED',
      `${failed.length} record(s) of the batch failed: ${failed.slice(0, 5).join(', ')}`,
      options,
    );
  }
}

/**
 * The event is not one the handler was built for (for example an SQS handler given a Kafka event).
 *
 * @example
 * ```ts
 * if (isOncelyError(error, 'LAMBDA_EVENT_INVALID')) console.error('wrong trigger wired to this function');
 * ```
 */
export class InvalidEventError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('LAMBDA_EVENT_INVALID', message, options);
  }
}
