import { LeaseLostError, OncelyError, type OncelyErrorCode } from '@oncely/core';

/**
 * Stable code of {@link PubSubOperationError}.
 *
 * @example
 * ```ts
 * if ((error as { code?: string }).code === PUBSUB_OPERATION_FAILED) console.warn('Pub/Sub call failed');
 * ```
 */
export const PUBSUB_OPERATION_FAILED = 'PUBSUB_OPERATION_FAILED' as OncelyErrorCode;

/**
 * The per-ack-ID code the service returns for an ack or modAck of an ack ID that is no
 * longer valid (exactly-once subscriptions), in `google.rpc.ErrorInfo.metadata`.
 */
export const INVALID_ACK_ID = 'PERMANENT_FAILURE_INVALID_ACK_ID';

/**
 * A Pub/Sub call failed for a reason other than a stale ack ID: the whole RPC failed
 * (`grpcCode`), or the service reported a per-ack-ID failure other than an invalid ack
 * ID (`ackIdCode`). The settlement rejects with it, so the core logs and counts it
 * (`ackFailed`).
 *
 * @example
 * ```ts
 * consumer.on('ackFailed', (e) => {
 *   if (e.error instanceof PubSubOperationError) console.warn(e.error.operation, e.error.grpcCode);
 * });
 * ```
 */
export class PubSubOperationError extends OncelyError {
  constructor(
    readonly operation: string,
    readonly grpcCode: number | undefined,
    readonly ackIdCode: string | undefined,
    message: string,
    options?: ErrorOptions,
  ) {
    // The core's code union has no entry for adapter-specific failures; the cast keeps a
    // stable, honest code instead of borrowing an unrelated one.
    super(PUBSUB_OPERATION_FAILED, `Pub/Sub ${operation} failed: ${message}`, options);
  }
}

/**
 * A message the Pub/Sub service would refuse (INVALID_ARGUMENT), found before publishing
 * it: more than 100 attributes, an attribute name over 256 bytes or a value over 1,024,
 * an ordering key over 1,024 bytes, or more than 10,000,000 bytes in all. Retrying it
 * cannot help; the outbox producer fails such a row permanently.
 *
 * @example
 * ```ts
 * try { await publishWithId(topic, message); } catch (e) { if (e instanceof PubSubMessageInvalidError) console.error(e.message); }
 * ```
 */
export class PubSubMessageInvalidError extends PubSubOperationError {
  constructor(message: string) {
    super('Publish', 3 /* INVALID_ARGUMENT */, undefined, message);
  }
}

/**
 * The per-ack-ID codes of a failed Acknowledge or ModifyAckDeadline
 * (`errorInfoMetadata`, which google-gax decodes from `grpc-status-details-bin`).
 * Empty when the error carries none.
 *
 * @example
 * ```ts
 * ackIdErrors(error).get(ackId); // 'PERMANENT_FAILURE_INVALID_ACK_ID'
 * ```
 */
export function ackIdErrors(error: unknown): Map<string, string> {
  const metadata = (error as { errorInfoMetadata?: unknown } | null)?.errorInfoMetadata;
  const codes = new Map<string, string>();
  if (typeof metadata !== 'object' || metadata === null) return codes;
  for (const [ackId, code] of Object.entries(metadata)) if (typeof code === 'string') codes.set(ackId, code);
  return codes;
}

/**
 * True when the error (or per-ack-ID code) says an ack ID is no longer valid: its lease
 * lapsed or the message went out again with a newer ack ID. Only exactly-once
 * subscriptions report it; the others accept stale acks silently.
 *
 * @example
 * ```ts
 * isInvalidAckId('PERMANENT_FAILURE_INVALID_ACK_ID'); // true
 * ```
 */
export function isInvalidAckId(code: string | undefined): boolean {
  return code === INVALID_ACK_ID;
}

/**
 * A settlement or lease call's failure as the core expects it: an invalid ack ID becomes
 * {@link LeaseLostError} (the core stops renewing and counts `ackFailed`, never a second
 * effect); anything else a {@link PubSubOperationError}.
 *
 * @example
 * ```ts
 * throw toSettlementError('Acknowledge', error, codeForThisAckId);
 * ```
 */
export function toSettlementError(operation: string, error: unknown, ackIdCode?: string): Error {
  if (isInvalidAckId(ackIdCode)) {
    return new LeaseLostError(`Pub/Sub ${operation}: the ack ID is no longer valid (${ackIdCode})`, {
      cause: error,
    });
  }
  if (error instanceof OncelyError) return error;
  const grpcCode = (error as { code?: unknown } | null)?.code;
  const message = (error as { message?: unknown } | null)?.message ?? ackIdCode ?? String(error);
  return new PubSubOperationError(
    operation,
    typeof grpcCode === 'number' ? grpcCode : undefined,
    ackIdCode,
    String(message),
    { cause: error },
  );
}
