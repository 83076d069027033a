import type { v1 } from '@google-cloud/pubsub';
import { ackIdErrors, toSettlementError } from './errors.js';

/** Ack IDs per request: well under the service's 512 KB request limit. */
const MAX_IDS_PER_REQUEST = 1000;
/** How long a settlement waits for others to share its request (unless sent sooner: flushNow()). */
const SETTLEMENT_WINDOW_MS = 5;
/** Per-ack-ID `TRANSIENT_*` failures are retried this many times. */
const MAX_TRANSIENT_RETRIES = 5;

type Kind = { op: 'ack' } | { op: 'modAck'; seconds: number };

interface Pending {
  ackId: string;
  resolve(): void;
  reject(error: Error): void;
  tries: number;
}

/**
 * Acknowledge and ModifyAckDeadline as unary calls of the generated v1 client, batched
 * over a few milliseconds, resolving per ack ID only once the service has answered.
 *
 * Without exactly-once the adapter settles through this rather than through
 * `Message.ack()` / `ackWithResponse()`, which resolve before the request is sent: the
 * core must know the ack reached the service (and a graceful stop closes the stream
 * first, then still acks the in-flight messages after their commit). With exactly-once
 * the client's `*WithResponse` calls are used; this client is then only used for the
 * leases of messages waiting in the adapter. It reads the same per-ack-ID result
 * (`ErrorInfo` metadata): `PERMANENT_FAILURE_INVALID_ACK_ID` rejects that ack ID with
 * `LeaseLostError`, `TRANSIENT_*` is retried.
 *
 * @example
 * ```ts
 * const settle = new SettlementClient(new v1.SubscriberClient(pubsub.options), subscriptionName);
 * await settle.ack(message.ackId);
 * ```
 */
export class SettlementClient {
  private readonly batches = new Map<string, { kind: Kind; items: Pending[]; timer: NodeJS.Timeout }>();
  private readonly inFlight = new Set<Promise<void>>();
  private soon: NodeJS.Immediate | undefined;

  constructor(
    private readonly client: v1.SubscriberClient,
    private readonly subscription: string,
    private readonly windowMs = SETTLEMENT_WINDOW_MS,
  ) {}

  ack(ackId: string): Promise<void> {
    return this.add({ op: 'ack' }, ackId);
  }

  /** Sets the ack deadline to `seconds` from now; 0 hands the message out again at once. */
  modAck(ackId: string, seconds: number): Promise<void> {
    return this.add({ op: 'modAck', seconds }, ackId);
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

  /** Sends what is batched and waits for every request to be answered. */
  async drain(): Promise<void> {
    this.flushNow();
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  async close(): Promise<void> {
    await this.drain();
    await this.client.close();
  }

  private add(kind: Kind, ackId: string): Promise<void> {
    return new Promise<void>((resolve, reject) => this.enqueue(kind, { ackId, resolve, reject, tries: 0 }));
  }

  private enqueue(kind: Kind, item: Pending) {
    const key = kind.op === 'ack' ? 'ack' : `modAck:${kind.seconds}`;
    let batch = this.batches.get(key);
    if (!batch) {
      batch = { kind, items: [], timer: setTimeout(() => this.flush(key), this.windowMs) };
      this.batches.set(key, batch);
    }
    batch.items.push(item);
    if (batch.items.length >= MAX_IDS_PER_REQUEST) this.flush(key);
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
    try {
      if (kind.op === 'ack') {
        await this.client.acknowledge({ subscription: this.subscription, ackIds });
      } else {
        await this.client.modifyAckDeadline({
          subscription: this.subscription,
          ackIds,
          ackDeadlineSeconds: kind.seconds,
        });
      }
      for (const item of items) item.resolve();
    } catch (error) {
      // Exactly-once: the service names the failing ack IDs; an ack ID it does not name
      // in a request that failed that way succeeded.
      const codes = ackIdErrors(error);
      for (const item of items) {
        const code = codes.get(item.ackId);
        if (codes.size > 0 && code === undefined) item.resolve();
        else if (code?.startsWith('TRANSIENT_') && item.tries < MAX_TRANSIENT_RETRIES) {
          item.tries++;
          this.enqueue(kind, item);
        } else item.reject(toSettlementError(operation, error, code));
      }
    }
  }
}
