import type { Topic } from '@google-cloud/pubsub';
import { BrokerMisconfiguredError, type DeadLetterReason, isOncelyError, type Logger } from '@oncely/core';
import { deadLetterAttributes, readDeadLetter } from './deadLetterCopy.js';
import type { PubSubDelivery } from './PubSubDelivery.js';
import { MAX_ACK_DEADLINE_SECONDS } from './pubsubConfig.js';
import type { SettlementClient } from './SettlementClient.js';
import type { SubscriptionFacts } from './subscriptionFacts.js';

/**
 * Counters an application may export as metrics (`adapter.stats`).
 *
 * @example
 * ```ts
 * setInterval(() => gauge.set((adapter as PubSubAdapter).stats.staleAckIds), 10_000);
 * ```
 */
export interface PubSubAdapterStats {
  /** Messages received. */
  received: number;
  /** Settlements or lease renewals the service refused as an invalid ack ID (exactly-once only). */
  staleAckIds: number;
  /** Messages published to the dead-letter topic. */
  deadLettered: number;
  /** StreamingPull reopens after the client closed its subscriber on an error (see `health`). */
  reconnects: number;
  /**
   * Messages this consumer set to wait out a retry backoff (no retry policy) or parked
   * (no dead-letter topic) whose deadline has not passed yet: they are outstanding at the
   * service and take from `broker.maxDeferredMessages`, not from the handler slots.
   */
  readonly deferred: number;
}

/** What a {@link PubSubSettler} reads from its adapter. */
export interface PubSubSettlerContext {
  settlement: SettlementClient;
  /** The full name once the adapter resolved its project (at start). */
  subscriptionName(): string;
  facts(): SubscriptionFacts | undefined;
  deadLetterTopic(): Topic | undefined;
  /** Attributes a dead-letter copy must keep: the ones message IDs are read from. */
  idAttributes: readonly string[];
  /** `broker.maxDeferredMessages` as resolved at start. */
  maxDeferred(): number;
  /**
   * How many messages the service may have outstanding with this consumer: each stream's
   * max_outstanding_messages (the concurrency plus the reserve) times the streams.
   */
  outstandingCapacity(): number;
  stats: PubSubAdapterStats;
  log: Logger;
}

/**
 * How one delivery is settled on Pub/Sub: acks, renewals, nacks, delayed retries, dead
 * letters and parking, through the adapter's SettlementClient.
 *
 * Every change of a deadline that is ours (a delayed retry, a park, a nack) goes out only
 * after the client's receipt modAck of that message was answered: the client sends the
 * receipt modAck (the lease length) in a batch a few ms after receipt, without waiting,
 * and a later one overwrites an earlier one at the service. A message parked for 600 s
 * came back after one lease that way; a retry came after a lease instead of its backoff.
 *
 * @example
 * ```ts
 * const settler = new PubSubSettler(context);
 * await settler.retry(delivery, 5_000);
 * ```
 */
export class PubSubSettler {
  /** Deliveries waiting out a backoff or parked, with the time their deadline passes. */
  private readonly deferred = new Map<PubSubDelivery, { until: number; parked: boolean }>();
  private reserveFull = false;
  private wasStalled = false;

  constructor(private readonly context: PubSubSettlerContext) {}

  /** Deliveries waiting out a backoff or parked whose deadline has not passed. */
  get deferredCount(): number {
    this.pruneDeferred(Date.now());
    return this.deferred.size;
  }

  /** Of those, poison messages parked for want of a dead-letter topic. */
  get parkedCount(): number {
    this.pruneDeferred(Date.now());
    let parked = 0;
    for (const { parked: isParked } of this.deferred.values()) if (isParked) parked++;
    return parked;
  }

  /**
   * Every place the service may have outstanding with this consumer is held by a message
   * waiting out a backoff or parked: nothing new is received until one's deadline passes.
   */
  get stalled(): boolean {
    return this.deferredCount >= this.context.outstandingCapacity();
  }

  ack(delivery: PubSubDelivery): Promise<void> {
    return this.counted(this.context.settlement.ack(delivery.ackId, () => delivery.leaseExpiresAt));
  }

  /** A lease renewal: the deadline to `seconds` from now. */
  renew(delivery: PubSubDelivery, seconds: number): Promise<void> {
    return this.counted(this.modAck(delivery, seconds));
  }

  /** Hands it back at once (ModifyAckDeadline 0), after the receipt modAck. */
  release(delivery: PubSubDelivery): Promise<void> {
    return this.counted(this.afterReceipt(delivery, 0));
  }

  /**
   * A failed attempt. With a retry policy on the subscription a nack lets the service
   * apply its own backoff (the core's delay is then not used); without one, the ack
   * deadline is set to the delay (at most 600 s) and the service redelivers when it
   * lapses. Meanwhile the message is outstanding at the service: it counts against the
   * stream's flow control, whose reserve (`maxDeferredMessages`) is sized for it, not
   * against the handler slots.
   */
  async retry(delivery: PubSubDelivery, delayMs: number): Promise<void> {
    if (this.context.facts()?.retryPolicy) return this.release(delivery);
    const seconds = Math.min(MAX_ACK_DEADLINE_SECONDS, Math.max(0, Math.ceil(delayMs / 1000)));
    if (seconds > 0) this.defer(delivery, seconds, false);
    return this.counted(this.afterReceipt(delivery, seconds));
  }

  async deadLetter(delivery: PubSubDelivery, reason: DeadLetterReason, detail: string): Promise<void> {
    const { stats } = this.context;
    const subscriptionName = this.context.subscriptionName();
    const topic = this.context.deadLetterTopic();
    if (!topic) {
      // Park it as long as one deadline allows: never processed unprotected, never dropped.
      this.defer(delivery, MAX_ACK_DEADLINE_SECONDS, true);
      await this.afterReceipt(delivery, MAX_ACK_DEADLINE_SECONDS).catch(() => {});
      throw new BrokerMisconfiguredError(
        `cannot dead-letter (${reason}: ${detail}): ${subscriptionName} has no dead-letter topic; the message is parked for ${MAX_ACK_DEADLINE_SECONDS} s. Configure broker.deadLetterTopic or a dead-letter policy.`,
      );
    }
    const { message } = delivery;
    // Within Pub/Sub's limits (100 attributes, 1,024 bytes a value, 10 MB a message), or
    // the service would refuse the copy every time and the message would never leave.
    const attributes = deadLetterAttributes(
      message.attributes ?? {},
      {
        reason,
        detail,
        sourceMessageId: message.id,
        sourceSubscription: subscriptionName,
        ...(message.orderingKey ? { orderingKey: message.orderingKey } : {}),
      },
      message.data.length,
      this.context.idAttributes,
    );
    if (readDeadLetter(attributes) === undefined) {
      this.context.log.warn(
        `pubsub: the dead-letter copy of message ${message.id} carries no reason: the original's data and attributes leave no room within Pub/Sub's limits (${reason}: ${detail})`,
        { subscription: subscriptionName },
      );
    }
    await topic.publishMessage({ data: message.data, attributes });
    stats.deadLettered++;
    await this.ack(delivery);
  }

  private modAck(delivery: PubSubDelivery, seconds: number): Promise<void> {
    return this.context.settlement.modAck(delivery.ackId, seconds, () => delivery.leaseExpiresAt);
  }

  /**
   * ModifyAckDeadline `seconds`, once the client's receipt modAck of the message was
   * answered (or its lease is over: nothing of ours matters then) and no renewal of ours
   * can land after it.
   */
  private async afterReceipt(delivery: PubSubDelivery, seconds: number): Promise<void> {
    await Promise.all([delivery.receiptAnswered(), delivery.renewalsStopped()]);
    await this.modAck(delivery, seconds);
  }

  /**
   * Notes a message set to wait out `seconds` at the service (`parked`: a poison message
   * with nowhere to go); warns once the reserve is full, and says so as an error once
   * deferred messages hold every place the service may fill.
   */
  private defer(delivery: PubSubDelivery, seconds: number, parked: boolean): void {
    const now = Date.now();
    this.pruneDeferred(now);
    this.deferred.set(delivery, { until: now + seconds * 1000, parked });
    const { log } = this.context;
    const subscriptionName = this.context.subscriptionName();
    const full = this.deferred.size >= this.context.maxDeferred();
    if (full && !this.reserveFull) {
      log.warn(
        `pubsub: ${this.deferred.size} messages wait out a retry backoff or are parked: the flow-control reserve for them (broker.maxDeferredMessages = ${this.context.maxDeferred()}) is full, so from now on each more takes a handler slot's place at the service`,
        { subscription: subscriptionName },
      );
    }
    this.reserveFull = full;
    const stalled = this.stalled;
    if (stalled && !this.wasStalled) {
      const parkedCount = this.parkedCount;
      // A parked message comes back after 600 s as poison as it went, and is parked
      // again: when parked messages fill every place, only a dead-letter topic (or
      // someone acking them) frees the consumer.
      log.error(
        parkedCount === this.deferred.size
          ? `pubsub: ${parkedCount} poison messages are parked for want of a dead-letter topic and hold every place the service may fill (health.stalled): this consumer receives nothing new, and each comes back after ${MAX_ACK_DEADLINE_SECONDS} s to be parked again. Configure broker.deadLetterTopic or a dead-letter policy.`
          : `pubsub: ${this.deferred.size} messages waiting out a retry backoff (${parkedCount} of them parked poison messages) hold every place the service may fill (health.stalled): nothing new is received until their deadlines pass. Raise broker.maxDeferredMessages or shorten the backoff.`,
        { subscription: subscriptionName },
      );
    }
    this.wasStalled = stalled;
  }

  private pruneDeferred(now: number): void {
    for (const [delivery, { until }] of this.deferred) if (until <= now) this.deferred.delete(delivery);
  }

  /** Counts and logs invalid ack IDs; the rejection still reaches the core. */
  private async counted(call: Promise<void>): Promise<void> {
    try {
      await call;
    } catch (error) {
      if (isOncelyError(error, 'LEASE_LOST')) {
        this.context.stats.staleAckIds++;
        this.context.log.warn('pubsub: the ack ID is no longer valid (lease lapsed or message redelivered)', {
          error,
        });
      }
      throw error;
    }
  }
}
