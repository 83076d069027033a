import { LeaseLostError, OncelyError, type OncelyErrorCode } from '@oncely/core';

/**
 * Prefixes an error code may carry: the legacy query protocol's
 * (`x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender`) and the JSON
 * protocol's shape ID (`__type: com.amazonaws.sqs#ReceiptHandleIsInvalid`, which some
 * SQS-compatible servers return as `Code`).
 */
const CODE_PREFIXES = ['AWS.SimpleQueueService.', 'com.amazonaws.sqs#'];

function bareCode(raw: string): string {
  for (const prefix of CODE_PREFIXES) if (raw.startsWith(prefix)) return raw.slice(prefix.length);
  return raw;
}

/** SQS codes that say a receipt handle no longer holds the message. */
const STALE_HANDLE_CODES = new Set(['ReceiptHandleIsInvalid', 'MessageNotInflight']);

/**
 * Codes of a client whose credentials SQS refuses, or that has none (sqs-consumer's
 * `authenticationErrorTimeout` list, plus the AWS auth codes): polling again at once only
 * adds failed calls.
 */
const CREDENTIAL_CODES = new Set([
  'CredentialsError',
  'CredentialsProviderError',
  'InvalidClientTokenId',
  'UnrecognizedClientException',
  'SignatureDoesNotMatch',
  'InvalidSignatureException',
  'IncompleteSignature',
  'MissingAuthenticationToken',
  'ExpiredToken',
  'ExpiredTokenException',
  'RequestExpired',
  'AccessDenied',
  'AccessDeniedException',
  'InvalidSecurity',
  'InvalidAccessKeyId',
]);

/** SQS codes for a queue that does not exist (JSON protocol name and query-protocol code). */
const MISSING_QUEUE_CODES = new Set(['QueueDoesNotExist', 'NonExistentQueue']);

/**
 * Stable code of {@link SqsOperationError}.
 *
 * @example
 * ```ts
 * if ((error as { code?: string }).code === SQS_OPERATION_FAILED) console.warn('SQS call failed');
 * ```
 */
export const SQS_OPERATION_FAILED = 'SQS_OPERATION_FAILED' as OncelyErrorCode;

/**
 * A request to SQS failed for one message (a per-entry `Failed[]` result of a batch call,
 * or a single call) for a reason other than a stale receipt handle. The delivery's
 * settlement rejects with it, so the core logs and counts it (`ackFailed`).
 *
 * `code` is `'SQS_OPERATION_FAILED'`; `sqsCode` is the code SQS returned (for example
 * `InternalError`).
 *
 * @example
 * ```ts
 * consumer.on('ackFailed', (e) => {
 *   if (e.error instanceof SqsOperationError) console.warn(e.error.operation, e.error.sqsCode);
 * });
 * ```
 */
export class SqsOperationError extends OncelyError {
  constructor(
    readonly operation: string,
    readonly sqsCode: string,
    message: string,
    options?: ErrorOptions,
  ) {
    // The core's code union has no entry for adapter-specific failures yet; the cast keeps
    // a stable, honest code instead of borrowing an unrelated one.
    super(SQS_OPERATION_FAILED, `SQS ${operation} failed (${sqsCode}): ${message}`, options);
  }
}

/**
 * The SQS error code of an SDK error or of a batch entry's `Failed[]` item, without the
 * `AWS.SimpleQueueService.` or `com.amazonaws.sqs#` prefix. Looks at `Code` and `name`, never at message text.
 *
 * @example
 * ```ts
 * try { await client.send(cmd); } catch (e) { if (sqsErrorCode(e) === 'QueueDoesNotExist') ... }
 * ```
 */
export function sqsErrorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { Code, name } = error as { Code?: unknown; name?: unknown };
  // Modeled errors carry the JSON-protocol name in `name` ('MessageNotInflight') and the
  // query code in `Code`; unmodeled ones (InvalidParameterValue) carry the query code in both.
  for (const raw of [name, Code]) {
    if (typeof raw !== 'string' || raw === '' || raw === 'Error') continue;
    return bareCode(raw);
  }
  return undefined;
}

/** Every code an error carries (`name` and `Code` can differ: `QueueDoesNotExist` / `NonExistentQueue`). */
function sqsErrorCodes(error: unknown): string[] {
  if (typeof error !== 'object' || error === null) return [];
  const { Code, name } = error as { Code?: unknown; name?: unknown };
  return [name, Code].filter((raw): raw is string => typeof raw === 'string').map(bareCode);
}

/**
 * True when SQS says the receipt handle is stale: the visibility timeout lapsed (and
 * perhaps another consumer received the message), or the message is gone.
 *
 * `ReceiptHandleIsInvalid` and `MessageNotInflight` are recognised by code. An expired
 * handle is also reported as `InvalidParameterValue` ("Value … for parameter
 * ReceiptHandle is invalid. Reason: The receipt handle has expired."), and SQS uses that
 * same code for other bad parameters (a VisibilityTimeout above 43200, for example). The
 * code alone cannot tell them apart, so for this one code we look for the parameter name
 * `ReceiptHandle` in the message — the parameter name, not the reason wording, which
 * differs between SQS revisions.
 *
 * @example
 * ```ts
 * isStaleReceiptError({ Code: 'ReceiptHandleIsInvalid' }); // true
 * ```
 */
export function isStaleReceiptError(error: unknown): boolean {
  const codes = sqsErrorCodes(error);
  if (codes.some((code) => STALE_HANDLE_CODES.has(code))) return true;
  if (!codes.includes('InvalidParameterValue')) return false;
  const message =
    (error as { message?: unknown; Message?: unknown }).message ?? (error as { Message?: unknown }).Message;
  return typeof message === 'string' && /\bReceiptHandle\b/.test(message);
}

/**
 * True when SQS says the queue does not exist.
 *
 * @example
 * ```ts
 * if (isQueueMissingError(error)) console.error('create the queue first');
 * ```
 */
export function isQueueMissingError(error: unknown): boolean {
  return sqsErrorCodes(error).some((code) => MISSING_QUEUE_CODES.has(code));
}

/**
 * True when SQS refused the caller's credentials or the client has none (an expired
 * session token, a rotated key, no credential provider, HTTP 403): the receive loop then
 * waits `authErrorBackoffMs` before polling again. By code and status, never by message text.
 *
 * @example
 * ```ts
 * if (isCredentialError(error)) console.error('check the SQS credentials');
 * ```
 */
export function isCredentialError(error: unknown): boolean {
  if (sqsErrorCodes(error).some((code) => CREDENTIAL_CODES.has(code))) return true;
  const status = (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
  return status === 403;
}

/**
 * Maps a failure of a settlement or lease call to what the core expects: a stale receipt
 * handle becomes {@link LeaseLostError} (the core stops renewing, counts `ackFailed` and
 * never turns it into a second effect); anything else keeps its identity inside an
 * {@link SqsOperationError}.
 *
 * @example
 * ```ts
 * throw toSettlementError('DeleteMessage', error);
 * ```
 */
export function toSettlementError(operation: string, error: unknown): Error {
  if (isStaleReceiptError(error)) {
    return new LeaseLostError(`SQS ${operation}: the receipt handle is stale (${sqsErrorCode(error)})`, {
      cause: error,
    });
  }
  if (error instanceof OncelyError) return error;
  const code = sqsErrorCode(error) ?? 'Unknown';
  const message =
    (error as { message?: unknown } | null)?.message ??
    (error as { Message?: unknown } | null)?.Message ??
    error;
  return new SqsOperationError(operation, code, String(message), { cause: error });
}
