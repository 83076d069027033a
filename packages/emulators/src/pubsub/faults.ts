import { Metadata, status } from '@grpc/grpc-js';
import { ApiError } from './apiError.js';
import { encodeStatusWithErrorInfo } from './statusDetails.js';

/** The unary settlement RPCs the Node client sends (it never acks on the stream). */
export type SettlementRpc = 'Acknowledge' | 'ModifyAckDeadline';

/**
 * Which settlement requests fail, and how (`PubSubEmulator.failSettlements`).
 *
 * @example
 * ```ts
 * // A short outage of acks and modAcks: the next 5 requests fail with UNAVAILABLE.
 * const outage = emulator.failSettlements({ count: 5, code: status.UNAVAILABLE });
 * // An exactly-once refusal of the next ack: ErrorInfo names each ack ID as invalid.
 * emulator.failSettlements({ rpc: 'Acknowledge', count: 1, ackIdReason: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
 * ```
 */
export interface SettlementFailure {
  /** How many requests fail (each counts once, whatever its ack IDs). */
  count: number;
  /**
   * Fail only one matching request in every `every` (the `every`-th, the `2 × every`-th,
   * ...), and let the others through: a steady rate of failures under load (20 is 5 %)
   * rather than an outage. @default 1 (every matching request)
   */
  every?: number;
  /** @default both */
  rpc?: SettlementRpc;
  /** Only requests for this subscription (full name). @default any */
  subscription?: string;
  /**
   * Only ModifyAckDeadline requests with this deadline (0 is a nack): a test can fail
   * renewals and leave nacks alone. @default any
   */
  ackDeadlineSeconds?: number;
  /**
   * The gRPC status of the failed request. With `ackIdReason` it defaults to
   * INVALID_ARGUMENT (what the emulator answers for invalid exactly-once ack IDs); without
   * it, the request fails as a whole with this status (UNAVAILABLE: a transient outage the
   * client retries; FAILED_PRECONDITION: what the client files as `AckError`
   * `FAILED_PRECONDITION`). @default UNAVAILABLE, or INVALID_ARGUMENT with `ackIdReason`
   */
  code?: status;
  /**
   * The per-ack-ID reason the service puts in `google.rpc.ErrorInfo.metadata` for every
   * ack ID of the request, as it does on exactly-once subscriptions:
   * `PERMANENT_FAILURE_INVALID_ACK_ID` (the client's `AckError` `INVALID`),
   * `TRANSIENT_FAILURE_UNORDERED_ACK_ID` or any other `TRANSIENT_*` (the client retries),
   * anything else (`OTHER`). @default none: the status alone
   */
  ackIdReason?: string;
}

/**
 * A settlement failure the test set up: how many requests it failed so far, which ack
 * IDs those carried, and `clear()` to end it early.
 */
export interface SettlementFailureHandle {
  /** Requests failed so far. */
  readonly failed: number;
  /** Requests still to fail. */
  readonly remaining: number;
  /** The ack IDs of the failed requests, one entry per failed request and ack ID. */
  readonly ackIds: readonly string[];
  /** Stops failing requests now. */
  clear(): void;
}

interface ActiveFailure extends SettlementFailureHandle {
  spec: SettlementFailure;
  /** Counts a matching request; true when this one is to fail (see `every`). */
  due(): boolean;
  take(ackIds: readonly string[]): void;
}

/**
 * The emulator's fault hooks for Acknowledge and ModifyAckDeadline: each registered
 * failure fails the next `count` matching requests (oldest registration first) without
 * applying any of their ack IDs, the way the service answers a request it could not
 * process.
 */
export class SettlementFaults {
  private readonly active: ActiveFailure[] = [];

  add(spec: SettlementFailure): SettlementFailureHandle {
    if (!Number.isInteger(spec.count) || spec.count < 1)
      throw new RangeError('count must be a positive integer');
    const every = spec.every ?? 1;
    if (!Number.isInteger(every) || every < 1) throw new RangeError('every must be a positive integer');
    let failed = 0;
    let matched = 0;
    let cleared = false;
    const ackIds: string[] = [];
    const failure: ActiveFailure = {
      spec,
      get failed() {
        return failed;
      },
      get remaining() {
        return cleared ? 0 : spec.count - failed;
      },
      get ackIds() {
        return ackIds;
      },
      clear: () => {
        cleared = true;
        this.forget(failure);
      },
      due: () => ++matched % every === 0,
      take: (ids) => {
        failed++;
        ackIds.push(...ids);
        if (failed >= spec.count) this.forget(failure);
      },
    };
    this.active.push(failure);
    return failure;
  }

  /** The error for this request when a registered failure matches it, else undefined. */
  check(
    rpc: SettlementRpc,
    subscription: string,
    ackIds: readonly string[],
    ackDeadlineSeconds?: number,
  ): ApiError | undefined {
    const failure = this.active.find((candidate) => {
      const { spec } = candidate;
      if (spec.rpc !== undefined && spec.rpc !== rpc) return false;
      if (spec.subscription !== undefined && spec.subscription !== subscription) return false;
      if (spec.ackDeadlineSeconds !== undefined && spec.ackDeadlineSeconds !== ackDeadlineSeconds)
        return false;
      return candidate.due();
    });
    if (!failure) return undefined;
    failure.take(ackIds);
    const { ackIdReason } = failure.spec;
    const operation = rpc === 'Acknowledge' ? 'acknowledge' : 'modify ack deadline';
    if (ackIdReason === undefined) {
      const code = failure.spec.code ?? status.UNAVAILABLE;
      return new ApiError(code, `The ${operation} request failed (emulator fault hook, status ${code}).`);
    }
    const code = failure.spec.code ?? status.INVALID_ARGUMENT;
    const message = `Some ack IDs in the ${operation} request failed (emulator fault hook).`;
    const metadata = new Metadata();
    metadata.set(
      'grpc-status-details-bin',
      encodeStatusWithErrorInfo(code, message, {
        reason: 'EXACTLY_ONCE_ACKID_FAILURE',
        domain: 'pubsub.googleapis.com',
        metadata: Object.fromEntries(ackIds.map((ackId) => [ackId, ackIdReason])),
      }),
    );
    return new ApiError(code, message, metadata);
  }

  private forget(failure: ActiveFailure) {
    const at = this.active.indexOf(failure);
    if (at >= 0) this.active.splice(at, 1);
  }
}
