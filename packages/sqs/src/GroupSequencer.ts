import { isOncelyError, type Logger } from '@oncely/core';

/** How the core settled a delivery. */
export type Settlement = 'ack' | 'retry' | 'dead-letter' | 'release';

/** What the sequencer needs from a delivery. */
export interface SequencedDelivery {
  /** SQS FIFO `MessageGroupId`; undefined on standard queues. */
  readonly orderingKey: string | undefined;
  /** The settlement the core asked for; undefined while unsettled. */
  readonly settlement: Settlement | undefined;
  /** When the visibility timeout runs out, in epoch ms. */
  readonly leaseExpiresAt: number;
  extendLease(ms: number): Promise<void>;
  release(): Promise<void>;
}

export interface GroupSequencerOptions<D extends SequencedDelivery> {
  /** Hands a delivery to the core; resolves once it is settled. */
  dispatch(delivery: D): Promise<void>;
  /** Called exactly once per submitted delivery, when the adapter no longer holds it. */
  onDone(delivery: D): void;
  /** How far a heartbeat pushes the visibility of deliveries waiting for their turn. */
  extendByMs(): number;
  /** How often the heartbeat runs. @default half of `extendByMs()` */
  heartbeatIntervalMs?(): number;
  log: Logger;
}

/**
 * Serialises dispatch per SQS FIFO message group: messages of one `MessageGroupId` run
 * in order, one at a time; other groups (and standard-queue messages, which have none)
 * run in parallel.
 *
 * SQS can return several messages of one group in one receive. The later ones wait here
 * for their turn, their visibility kept alive by a heartbeat (otherwise they would lapse
 * while the first runs, come back, and be handled twice or out of order). When a
 * message of a group is not finished in order — retried later, released, its lease lost
 * — the messages queued behind it are released (visibility 0) rather than run: SQS keeps
 * the group blocked while the earlier one is invisible, so they come back after it, in
 * order.
 *
 * @example
 * ```ts
 * const sequencer = new GroupSequencer({ dispatch: (d) => runtime.dispatch(d), onDone, extendByMs: () => 30000, log });
 * sequencer.submit(delivery);
 * ```
 */
export class GroupSequencer<D extends SequencedDelivery> {
  /** Messages waiting behind the running one, per group. A key is present while its group runs. */
  private readonly groups = new Map<string, D[]>();
  private heartbeat: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly options: GroupSequencerOptions<D>) {}

  /** Messages received but waiting for their group's turn. */
  get waitingCount(): number {
    let count = 0;
    for (const waiting of this.groups.values()) count += waiting.length;
    return count;
  }

  submit(delivery: D): void {
    const key = delivery.orderingKey;
    if (key === undefined) {
      void this.run(delivery);
      return;
    }
    const waiting = this.groups.get(key);
    if (waiting) {
      if (this.stopped) {
        void this.releaseOne(delivery);
        return;
      }
      waiting.push(delivery);
      this.startHeartbeat();
      return;
    }
    this.groups.set(key, []);
    void this.runGroup(key, delivery);
  }

  /** Stop: releases every waiting message at once; running ones finish. */
  async releaseWaiting(): Promise<void> {
    this.stopped = true;
    this.stopHeartbeat();
    const released: Promise<void>[] = [];
    for (const waiting of this.groups.values()) {
      for (const delivery of waiting.splice(0)) released.push(this.releaseOne(delivery));
    }
    await Promise.all(released);
  }

  private async run(delivery: D): Promise<void> {
    try {
      await this.options.dispatch(delivery);
    } catch (error) {
      // runtime.dispatch never rejects; if it did, the unsettled message returns after its lease.
      this.options.log.error('sqs: dispatch rejected', { error });
    } finally {
      this.options.onDone(delivery);
    }
  }

  private async runGroup(key: string, first: D): Promise<void> {
    const waiting = this.groups.get(key)!;
    let next: D | undefined = first;
    while (next) {
      await this.run(next);
      // Ack and dead-letter finish a message in order; anything else leaves it to come back.
      const finished = next.settlement === 'ack' || next.settlement === 'dead-letter';
      if (!finished || this.stopped) break;
      next = waiting.shift();
      if (next && !(await this.refresh(next))) next = undefined;
    }
    await this.releaseRest(waiting);
    // releaseRest returns with `waiting` empty, in the same tick as this delete: a message
    // of this group received from now on starts the group afresh.
    this.groups.delete(key);
    if (this.waitingCount === 0) this.stopHeartbeat();
  }

  /**
   * Before a message that waited runs: make sure its visibility is well ahead, so the
   * core's lease keeper (which starts at dispatch) has time for its first renewal.
   * Returns false when the lease is gone; the message is dropped (SQS redelivers it).
   */
  private async refresh(delivery: D): Promise<boolean> {
    const extendBy = this.options.extendByMs();
    if (delivery.leaseExpiresAt - Date.now() >= extendBy * 0.75) return true;
    try {
      await delivery.extendLease(extendBy);
      return true;
    } catch (error) {
      if (isOncelyError(error, 'LEASE_LOST') || delivery.leaseExpiresAt <= Date.now()) {
        this.options.log.warn('sqs: a FIFO message lost its visibility while waiting for its group', {
          error,
        });
        this.options.onDone(delivery);
        return false;
      }
      return true;
    }
  }

  private async releaseRest(waiting: D[]): Promise<void> {
    while (waiting.length > 0) {
      await Promise.all(waiting.splice(0).map((delivery) => this.releaseOne(delivery)));
    }
  }

  private async releaseOne(delivery: D): Promise<void> {
    try {
      await delivery.release();
    } catch (error) {
      // It comes back when its visibility lapses instead; still never run out of order.
      this.options.log.warn('sqs: could not release a waiting FIFO message', { error });
    } finally {
      this.options.onDone(delivery);
    }
  }

  private startHeartbeat(): void {
    if (this.heartbeat) return;
    const intervalMs = Math.max(
      100,
      this.options.heartbeatIntervalMs?.() ?? Math.floor(this.options.extendByMs() / 2),
    );
    this.heartbeat = setInterval(() => this.beat(), intervalMs);
    this.heartbeat.unref?.();
  }

  private stopHeartbeat(): void {
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }

  private beat(): void {
    if (this.waitingCount === 0) {
      this.stopHeartbeat();
      return;
    }
    const extendBy = this.options.extendByMs();
    for (const waiting of this.groups.values()) {
      for (const delivery of [...waiting]) {
        delivery.extendLease(extendBy).catch((error) => {
          if (!isOncelyError(error, 'LEASE_LOST')) {
            this.options.log.warn('sqs: visibility heartbeat of a waiting FIFO message failed; retrying', {
              error,
            });
            return;
          }
          const index = waiting.indexOf(delivery);
          if (index < 0) return; // already running: the core's lease keeper finds out itself
          // Lost: SQS redelivers it. Those behind it must not overtake it.
          const [lost, ...behind] = waiting.splice(index);
          this.options.log.warn('sqs: a FIFO message lost its visibility while waiting for its group', {
            error,
          });
          this.options.onDone(lost!);
          for (const later of behind) void this.releaseOne(later);
        });
      }
    }
  }
}
