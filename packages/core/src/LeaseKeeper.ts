import { HandlerTimeoutError, isOncelyError, LeaseLostError } from './errors.js';
import type { AdapterLease, Delivery } from './types.js';

/** What a {@link LeaseKeeper} renews, how, and whom it tells (the consumer builds one per held delivery). */
export interface LeaseKeeperOptions {
  delivery: Delivery;
  /** The adapter's lease facts; absent when the broker has no renewable lease. */
  brokerLease?: AdapterLease;
  /** False turns broker renewal off (lease-loss tests). */
  renewBroker: boolean;
  /** Leased mode: renews the DB claim; resolves false when the claim was taken over. */
  renewClaim?: () => Promise<boolean>;
  /** Leased mode: the DB claim's length. */
  claimMs?: number;
  handlerTimeoutMs: number;
  onRenewed(): void;
  onLost(error: Error): void;
  onRenewError(error: unknown): void;
  now?: () => number;
}

/**
 * Keeps one delivery's leases alive — the broker lease and, in leased mode, the DB
 * claim — on one timer, from receipt until the settlement is sent (see handOver). Also
 * while a duplicate waits on another transaction's marker row, and while a batch waits
 * for its commit: the lease must outlive everything that happens before the ack.
 *
 * It enforces its own deadlines because some brokers never report a failed renewal
 * (Pub/Sub without exactly-once delivery acks every modAck): the handler timeout, and
 * the broker's maximum total lease measured from receipt (SQS 12 h), a margin before
 * the last lease runs out. When a renewal fails, a deadline passes or the adapter
 * reports the delivery lost (`Delivery.lost`), `signal` aborts.
 */
export class LeaseKeeper {
  /**
   * Created when first asked for: an AbortController per delivery was a large share of
   * the consumer's own CPU per message, and most handlers never read `ctx.signal`.
   */
  private controller: AbortController | undefined;
  /** Why the leases were given up, when that happened before anyone asked for `signal`. */
  private abortedWith: Error | undefined;
  private readonly receivedAt: number;
  private readonly intervalMs: number | undefined;
  /** The broker lease is renewed here (an adapter lease, an `extendLease`, renewal on). */
  private readonly brokerRenewable: boolean;
  /**
   * When the broker's cap on the total lease (`AdapterLease.maxTotalMs`) ends the last
   * lease, on our clock; undefined without a cap or without broker renewal.
   */
  private readonly brokerCapAt: number | undefined;
  /** How long before the cap the signal aborts, so the handler can stop while it holds the lease. */
  private readonly capMarginMs: number;
  /**
   * The broker renewal sent last, settled either way: a settlement must land after it
   * (see handOver), or a renewal answered late would undo a hand-back.
   */
  private brokerRenewal: Promise<void> | undefined;
  private brokerExpiresAt: number | undefined;
  /**
   * Leased mode: when the DB claim may have lapsed, on our clock, measured from the start
   * of the call that set it (so never later than the database's own deadline, which is
   * counted from when the statement ran). Past it another consumer may take over.
   */
  private claimExpiresAt: number | undefined;
  private renewTimer: NodeJS.Timeout | undefined;
  private handlerTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Listens on the delivery's `lost` signal, when it has one (see start). */
  private lostListener: (() => void) | undefined;
  private readonly now: () => number;

  constructor(private readonly options: LeaseKeeperOptions) {
    this.now = options.now ?? Date.now;
    this.receivedAt = options.delivery.receivedAt ?? this.now();
    const { brokerLease, delivery, renewBroker, claimMs } = options;
    const brokerRenewable = renewBroker && brokerLease !== undefined && delivery.extendLease !== undefined;
    this.brokerRenewable = brokerRenewable;
    this.brokerExpiresAt =
      delivery.leaseExpiresAt ?? (brokerLease ? this.receivedAt + brokerLease.extendByMs : undefined);
    // Renew at half the shorter lease: one late or failed tick still leaves time for the next.
    const shortest = Math.min(
      brokerRenewable ? brokerLease.extendByMs : Number.POSITIVE_INFINITY,
      options.renewClaim && claimMs !== undefined ? claimMs : Number.POSITIVE_INFINITY,
    );
    this.intervalMs = Number.isFinite(shortest) ? Math.max(20, Math.floor(shortest / 2)) : undefined;
    this.brokerCapAt =
      brokerRenewable && brokerLease.maxTotalMs !== undefined
        ? this.receivedAt + brokerLease.maxTotalMs
        : undefined;
    // A tenth of the renewal interval, at least 20 ms (timer and call latency), at most
    // 1 s: a cap that falls early in a long lease must not end it much before its time.
    this.capMarginMs = Math.min(1000, Math.max(20, Math.floor((this.intervalMs ?? 0) / 10)));
  }

  /** Aborts when the lease is lost or a deadline passes. */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.abortedWith !== undefined) this.controller.abort(this.abortedWith);
    }
    return this.controller.signal;
  }

  /** `signal.aborted`, without creating the signal. */
  get aborted(): boolean {
    return this.controller === undefined ? this.abortedWith !== undefined : this.controller.signal.aborted;
  }

  /** `signal.reason`, without creating the signal. */
  get reason(): unknown {
    return this.controller === undefined ? this.abortedWith : this.controller.signal.reason;
  }

  start(): void {
    const { lost } = this.options.delivery;
    if (lost?.aborted) this.onDeliveryLost();
    else if (lost !== undefined) {
      // Made here, not as a field: most brokers' deliveries have no `lost` signal, and a
      // listener per keeper would be garbage for every one of them.
      this.lostListener = () => this.onDeliveryLost();
      // Removed in stop(): one channel's signal serves every delivery it makes.
      lost.addEventListener('abort', this.lostListener, { once: true });
    }
    if (this.intervalMs === undefined) return;
    const firstDelay = this.firstRenewalDelay(this.intervalMs);
    // Due already: renewed now, not after a timer that a busy event loop may run late
    // (the lease may have only milliseconds left).
    if (firstDelay === 0) void this.renew();
    else this.schedule(firstDelay);
  }

  /**
   * The first renewal comes, like every later one, once no more than half a lease (one
   * interval) is left of the delivery's own lease: at once for a delivery that waited in
   * the adapter for a slot (renewed by it meanwhile) and is handed over with less, where
   * half a lease after dispatch would come after its lease ended.
   */
  private firstRenewalDelay(intervalMs: number): number {
    if (!this.brokerRenewable || this.brokerExpiresAt === undefined) return intervalMs;
    const left = this.brokerExpiresAt - this.now();
    return Math.max(0, Math.min(intervalMs, left - intervalMs));
  }

  private onDeliveryLost(): void {
    if (this.stopped) return;
    const cause = this.options.delivery.lost?.reason;
    this.lose(new LeaseLostError('the broker can no longer settle this delivery', { cause }));
  }

  /** Starts the handler's clock; `signal` aborts with `HandlerTimeoutError` when it runs out. */
  startHandlerClock(): void {
    clearTimeout(this.handlerTimer);
    this.handlerTimer = setTimeout(
      () =>
        this.abort(new HandlerTimeoutError(`handler ran longer than ${this.options.handlerTimeoutMs} ms`)),
      this.options.handlerTimeoutMs,
    );
    this.handlerTimer.unref?.();
  }

  /** Leased mode: the DB claim was just acquired (or taken over); its deadline starts now. */
  claimAcquired(): void {
    if (this.options.claimMs !== undefined) this.claimExpiresAt = this.now() + this.options.claimMs;
  }

  stopHandlerClock(): void {
    clearTimeout(this.handlerTimer);
  }

  /** Aborts the signal from outside (shutdown deadline). */
  abort(reason: Error): void {
    if (this.controller === undefined) this.abortedWith ??= reason;
    else if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  /**
   * The settlement is about to be sent: renews no more, and resolves once the broker
   * renewal already sent was answered, so the settlement lands after it. A hand-back
   * (retryLater, release, deadLetter) sets the lease itself — a delay, an abandon, a
   * park — and a renewal that reached the broker after it undid it (a retry's backoff cut
   * to one lease, a parked message back after one lease). An ack or a dead-letter ends
   * the message: a lease that lapses while it is on its way costs at most a redelivery,
   * which meets the marker. The wait is bounded by what is left of the lease: past it the
   * broker has given the message back, and a renewal that late changes nothing.
   */
  async handOver(): Promise<void> {
    this.stopRenewing();
    const renewal = this.brokerRenewal;
    if (renewal === undefined) return;
    const left = (this.brokerExpiresAt ?? this.now()) - this.now();
    if (left <= 0) return;
    let timer: NodeJS.Timeout | undefined;
    const leaseOver = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, left);
      timer.unref?.();
    });
    try {
      await Promise.race([renewal, leaseOver]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Stops renewing: call once the settlement is confirmed. */
  stop(): void {
    this.stopRenewing();
    clearTimeout(this.handlerTimer);
    if (this.lostListener !== undefined)
      this.options.delivery.lost?.removeEventListener('abort', this.lostListener);
  }

  /** No renewal from now on, and no loss reported: the settlement decides what happens to the lease. */
  private stopRenewing(): void {
    this.stopped = true;
    clearTimeout(this.renewTimer);
  }

  /**
   * The next renewal in `delayMs`, or sooner when the broker's cap comes first: then that
   * tick is the one that gives the lease up (renew), on time rather than at the next
   * renewal, which may come half a lease after the message went back to the broker.
   */
  private schedule(delayMs = this.intervalMs ?? 0): void {
    if (this.stopped) return;
    const untilCap =
      this.brokerCapAt === undefined
        ? Number.POSITIVE_INFINITY
        : this.brokerCapAt - this.capMarginMs - this.now();
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(0, Math.min(delayMs, untilCap)));
    this.renewTimer.unref?.();
  }

  private async renew(): Promise<void> {
    if (this.stopped) return;
    const { delivery, brokerLease, renewBroker, renewClaim, claimMs } = this.options;
    try {
      if (renewBroker && brokerLease && delivery.extendLease) {
        if (this.brokerCapAt !== undefined && this.now() >= this.brokerCapAt - this.capMarginMs) {
          // The broker's cap on the total lease ends the last lease (renewed up to it) in a
          // moment, and the message comes back: the handler is told now, while the lease
          // still holds, so it can stop before the message is handed to someone else.
          this.lose(
            new LeaseLostError(`the broker's maximum lease of ${brokerLease.maxTotalMs} ms is reached`),
          );
          return;
        }
        const extendBy = this.cappedExtension(brokerLease);
        const extending = delivery.extendLease(extendBy);
        this.brokerRenewal = extending.then(
          () => {},
          () => {},
        );
        await extending;
        this.brokerExpiresAt = this.now() + extendBy;
      }
      // Handed over (or stopped) while the broker renewal was on its way: the claim is
      // completed or given back by now, and a renewal finding it so is no loss.
      if (this.stopped) return;
      if (renewClaim) {
        const renewedFrom = this.now();
        const renewed = await renewClaim();
        if (this.stopped) return;
        if (!renewed) {
          this.lose(new LeaseLostError('the leased-mode claim was taken over by another consumer'));
          return;
        }
        if (this.claimExpiresAt !== undefined && claimMs !== undefined)
          this.claimExpiresAt = renewedFrom + claimMs;
      }
      if (this.stopped) return;
      this.options.onRenewed();
    } catch (error) {
      if (this.stopped) return;
      if (isOncelyError(error, 'LEASE_LOST')) {
        this.lose(error);
        return;
      }
      // A transient failure (network blip): keep trying while the leases can still be
      // alive, sooner than usual, and give up while there is still a margin: once the DB
      // claim lapses another consumer may take over while this handler still runs.
      this.options.onRenewError(error);
      const remaining =
        Math.min(this.brokerExpiresAt ?? Infinity, this.claimExpiresAt ?? Infinity) - this.now();
      const margin = Math.max(20, Math.floor((claimMs ?? this.intervalMs ?? 0) / 10));
      if (remaining <= margin) {
        this.lose(
          new LeaseLostError('lease renewal kept failing until the lease (nearly) expired', { cause: error }),
        );
        return;
      }
      this.schedule(
        Math.min(this.intervalMs ?? remaining, Math.max(10, Math.floor((remaining - margin) / 3))),
      );
      return;
    }
    this.schedule();
  }

  private cappedExtension(lease: AdapterLease): number {
    if (lease.maxTotalMs === undefined) return lease.extendByMs;
    return Math.min(lease.extendByMs, this.receivedAt + lease.maxTotalMs - this.now());
  }

  private lose(error: Error): void {
    this.stopped = true;
    clearTimeout(this.renewTimer);
    this.abort(error);
    this.options.onLost(error);
  }
}
