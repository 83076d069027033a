import type { v1 } from '@google-cloud/pubsub';
import { ackIdErrors, isInvalidAckId, PubSubOperationError, toSettlementError } from './errors.js';

/** Ack IDs per request: well under the service's 512 KB request limit. */
const MAX_IDS_PER_REQUEST = 1000;
/** How long a settlement waits for others to share its request (unless sent sooner: flushNow()). */
const SETTLEMENT_WINDOW_MS = 5;
/** First pause before a transient failure is retried; it doubles up to the next. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;
/**
 * Whole-request statuses that are retried: the ones the client itself treats as
 * transient for exactly-once acks (ack-metadata.js): DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
 * ABORTED, INTERNAL, UNAVAILABLE.
 */
const TRANSIENT_STATUSES = new Set([4, 8, 10, 13, 14]);
/**
 * gax's own retries are off: they retry UNAVAILABLE for up to 10 minutes whatever the
 * lease, and know nothing of per-ack-ID results. This client retries instead, until the
 * lease of each ack ID ends.
 */
const NO_GAX_RETRY = { retry: { retryCodes: [], backoffSettings: {} } } as never;

type Kind = { op: 'ack' } | { op: 'modAck'; seconds: number };

interface Pending {
  ackId: string;
  /** Epoch ms after which a transient failure is no longer retried: the lease's end. */
  retryUntil: () => number;
  resolve(): void;
  reject(error: Error): void;
  tries: number;
}

/**
 * Acknowledge and ModifyAckDeadline as unary calls of the generated v1 client, batched
 * over a few milliseconds, resolving per ack ID only once the service has answered.
 *
 * The adapter settles and renews through this rather than through the client's
 * `Message.ack()` / `*WithResponse()`. Without exactly-once those resolve before the
 * request is sent, and the core must know the ack reached the service (a graceful stop
 * also closes the stream first, then still acks the in-flight messages after their
 * commit). With exactly-once the client retries a modAck three times (about 7 s) and then
 * fails it with `AckError` `INVALID`, the code it also gives an invalid ack ID, and
 * rethrows that for every later ack of the message: a short outage would pass for a lost
 * lease, and a committed message would never be acked.
 *
 * Failures are read per ack ID (`ErrorInfo` metadata, exactly-once subscriptions):
 * `PERMANENT_FAILURE_INVALID_ACK_ID` rejects that ack ID with `LeaseLostError`; a
 * `TRANSIENT_*` reason, or a whole request failing with a transient status, is retried
 * with the same ack ID (100 ms, doubling to 2 s) until `retryUntil` (the lease's end),
 * then rejected with `PubSubOperationError`; anything else is rejected with it at once.
 * An ack ID a failed request does not name in its metadata was applied.
 *
 * @example
 * ```ts
 * const settle = new SettlementClient(new v1.SubscriberClient(pubsub.options), () => subscriptionName);
 * await settle.ack(message.ackId, () => leaseExpiresAt);
 * ```
 */
export class SettlementClient {
  private readonly batches = new Map<string, { kind: Kind; items: Pending[]; timer: NodeJS.Timeout }>();
  private readonly inFlight = new Set<Promise<void>>();
  /** Items waiting out a retry pause, with their timers. */
  private readonly retrying = new Map<Pending, { kind: Kind; timer: NodeJS.Timeout; operation: string }>();
  private retryWake: (() => void) | undefined;
  private soon: NodeJS.Immediate | undefined;
  private immediate = false;
  private closing = false;

  constructor(
    private readonly client: v1.SubscriberClient,
    /** The subscription's full name: known once the adapter resolved its project (at start). */
    private readonly subscription: () => string,
    private readonly windowMs = SETTLEMENT_WINDOW_MS,
  ) {}

  /** Acknowledges; transient failures are retried until `retryUntil()` (epoch ms). */
  ack(ackId: string, retryUntil: () => number): Promise<void> {
    return this.add({ op: 'ack' }, ackId, retryUntil);
  }

  /**
   * Sets the ack deadline to `seconds` from now; 0 hands the message out again at once.
   * Transient failures are retried until `retryUntil()` (epoch ms).
   */
  modAck(ackId: string, seconds: number, retryUntil: () => number): Promise<void> {
    return this.add({ op: 'modAck', seconds }, ackId, retryUntil);
  }

  /** Sends what is batched now, without waiting out the window. */
  flushNow(): void {
    clearImmediate(this.soon);
    this.soon = undefined;
    for (const key of [...this.batches.keys()]) this.flush(key);
  }

  /**
   * Sends what is batched once this turn of the event loop is over, without waiting out
   * the window: the settlements a finished batch asks for one after the other still
   * share a request.
   */
  flushSoon(): void {
    this.soon ??= setImmediate(() => this.flushNow());
  }

  /**
   * From now on nothing waits out the window: what is batched goes now, and each later
   * settlement at the end of the turn it was asked in (stop: nothing much is coming to
   * share a request any more).
   */
  sendImmediately(): void {
    this.immediate = true;
    this.flushNow();
  }

  /** Sends what is batched and waits until every ack ID has its answer (retries included). */
  async drain(): Promise<void> {
    for (;;) {
      this.flushNow();
      if (this.inFlight.size > 0) {
        await Promise.allSettled([...this.inFlight]);
      } else if (this.retrying.size > 0) {
        await new Promise<void>((resolve) => {
          this.retryWake = resolve;
        });
      } else if (this.batches.size === 0) {
        return;
      }
    }
  }

  /**
   * Sends what is batched, gives up what waits out a retry pause (the consumer is done
   * waiting: its stop deadline passed; the message comes back, a duplicate for the
   * marker), waits for the requests on their way, and closes the client. Without that, a
   * retry that may go on for the lease (up to 600 s) held the consumer's stop as long.
   */
  async close(): Promise<void> {
    this.closing = true;
    for (const [item, { timer, operation }] of this.retrying) {
      clearTimeout(timer);
      item.reject(
        new PubSubOperationError(
          operation,
          undefined,
          undefined,
          'given up: the consumer closed while it was retried',
        ),
      );
    }
    this.retrying.clear();
    this.retryWake?.();
    await this.drain();
    await this.client.close();
  }

  private add(kind: Kind, ackId: string, retryUntil: () => number): Promise<void> {
    return new Promise<void>((resolve, reject) =>
      this.enqueue(kind, { ackId, retryUntil, resolve, reject, tries: 0 }),
    );
  }

  private enqueue(kind: Kind, item: Pending): string {
    const key = kind.op === 'ack' ? 'ack' : `modAck:${kind.seconds}`;
    let batch = this.batches.get(key);
    if (!batch) {
      batch = { kind, items: [], timer: setTimeout(() => this.flush(key), this.windowMs) };
      this.batches.set(key, batch);
    }
    batch.items.push(item);
    if (batch.items.length >= MAX_IDS_PER_REQUEST) this.flush(key);
    else if (this.immediate) this.flushSoon();
    return key;
  }

  private flush(key: string) {
    const batch = this.batches.get(key);
    if (!batch) return;
    this.batches.delete(key);
    clearTimeout(batch.timer);
    const request = this.send(batch.kind, batch.items);
    this.inFlight.add(request);
    void request.finally(() => this.inFlight.delete(request));
  }

  private async send(kind: Kind, items: Pending[]): Promise<void> {
    const ackIds = items.map((item) => item.ackId);
    const operation = kind.op === 'ack' ? 'Acknowledge' : 'ModifyAckDeadline';
    const subscription = this.subscription();
    try {
      if (kind.op === 'ack') {
        await this.client.acknowledge({ subscription, ackIds }, NO_GAX_RETRY);
      } else {
        await this.client.modifyAckDeadline(
          { subscription, ackIds, ackDeadlineSeconds: kind.seconds },
          NO_GAX_RETRY,
        );
      }
      for (const item of items) item.resolve();
    } catch (error) {
      const codes = ackIdErrors(error);
      const status = (error as { code?: unknown } | null)?.code;
      for (const item of items) {
        const code = codes.get(item.ackId);
        // Exactly-once: an ack ID a request that failed that way does not name was applied.
        if (codes.size > 0 && code === undefined) item.resolve();
        else if (isInvalidAckId(code)) item.reject(toSettlementError(operation, error, code));
        else if (
          code !== undefined ? code.startsWith('TRANSIENT_') : TRANSIENT_STATUSES.has(status as number)
        )
          this.retryLater(kind, item, operation, error, code);
        else item.reject(toSettlementError(operation, error, code));
      }
    }
  }

  /** Sends `item` again after a pause, unless its lease ends first. */
  private retryLater(kind: Kind, item: Pending, operation: string, error: unknown, code: string | undefined) {
    const pauseMs = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** item.tries);
    if (this.closing || Date.now() + pauseMs >= item.retryUntil()) {
      item.reject(toSettlementError(operation, error, code));
      return;
    }
    item.tries++;
    const timer = setTimeout(() => {
      this.retrying.delete(item);
      // It waited its pause already: not the settlement window on top.
      this.flush(this.enqueue(kind, item));
      this.retryWake?.();
    }, pauseMs);
    this.retrying.set(item, { kind, timer, operation });
  }
}
