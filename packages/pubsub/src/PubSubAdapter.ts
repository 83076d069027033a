import {
  Duration,
  PubSub,
  type Message as PubSubMessage,
  type SubscriberOptions,
  SubscriptionCloseBehaviors,
  type Topic,
  v1,
} from '@google-cloud/pubsub';
import {
  type AdapterLease,
  type AdapterRuntime,
  type BrokerAdapter,
  BrokerMisconfiguredError,
  CONSUMER_DEFAULTS,
  type IdStrategy,
  isOncelyError,
  type Logger,
} from '@oncely/core';
import { ClientInternals, RECEIPT_MODACK_BATCH_MS } from './clientInternals.js';
import { PubSubDelivery } from './PubSubDelivery.js';
import { type PubSubAdapterStats, PubSubSettler } from './PubSubSettler.js';
import { maxExtensionMsFor, type PubSubSettings, parsePubSubConfig } from './pubsubConfig.js';
import { resolveProject } from './resolveProject.js';
import { SettlementClient } from './SettlementClient.js';
import { type PubSubAdapterHealth, SubscriberStream } from './SubscriberStream.js';
import {
  notPullable,
  readSubscriptionFacts,
  type SubscriptionFacts,
  topicExists,
} from './subscriptionFacts.js';
import { toEnvelope } from './toEnvelope.js';

/** The stream ack deadline the client sets on exactly-once subscriptions, whatever its options. */
const EXACTLY_ONCE_STREAM_DEADLINE_MS = 60_000;
/**
 * A waiting message handed to the core with less than half a lease plus this left is
 * renewed at dispatch (see launch()).
 */
const DISPATCH_RENEWAL_MARGIN_MS = 2_000;
/** `broker.maxDeferredMessages` by default: the consumer's concurrency, at least this. */
const MIN_DEFAULT_DEFERRED = 10;

/**
 * What `createAdapter` receives besides the broker section.
 *
 * @example
 * ```ts
 * const options: PubSubAdapterOptions = { consumerName: 'payments', log: console, maxAttempts: 5 };
 * ```
 */
export interface PubSubAdapterOptions {
  consumerName: string;
  log: Logger;
  idStrategy?: IdStrategy;
  /** The consumer's `maxAttempts`, to warn at start when the dead-letter policy would fire first. */
  maxAttempts?: number;
  handlerTimeoutMs?: number;
  outageHoldMs?: number;
  /**
   * How long an ack or nack waits for others to share its request while other deliveries
   * are still running (it goes when none is; deliveries waiting for their batch to fill do
   * not count). @default 5
   */
  settlementWindowMs?: number;
}

/**
 * The Google Cloud Pub/Sub adapter: `subscription.on('message')` (StreamingPull) with the
 * service's flow control set to the consumer's concurrency, leases renewed by the core's
 * lease keeper through ModifyAckDeadline, acks after commit (confirmed by the service;
 * with exactly-once a stale ack ID is an `ackFailed`, never a second effect), delayed
 * retries through the retry policy or the ack deadline, dead-lettering with a reason, and
 * one message at a time per ordering key.
 *
 * Usually created by `createConsumer` (`broker.type: 'pubsub'`) or `createPubSubConsumer`.
 *
 * @example
 * ```ts
 * const adapter = new PubSubAdapter({ type: 'pubsub', subscription: 'payments' }, { consumerName: 'payments', log: console });
 * const consumer = new Consumer({ name: 'payments', broker: { type: 'pubsub', subscription: 'payments' }, store, handler }, adapter);
 * await consumer.start();
 * ```
 */
export class PubSubAdapter implements BrokerAdapter {
  readonly type = 'pubsub';
  /** The endpoint and subscription, for the error of a failed start. */
  get address(): string {
    const { apiEndpoint, projectId, subscription } = this.settings;
    const name =
      this.resolvedName ??
      (subscription.startsWith('projects/') || !projectId
        ? subscription
        : `projects/${projectId}/subscriptions/${subscription}`);
    return `${apiEndpoint ?? process.env.PUBSUB_EMULATOR_HOST ?? 'pubsub.googleapis.com'} (${name})`;
  }
  readonly defaultIdStrategy: IdStrategy = { attribute: 'message-id' };
  readonly stats: PubSubAdapterStats;

  private readonly settings: PubSubSettings;
  private readonly pubsub: PubSub;
  private readonly ownsClient: boolean;
  private readonly log: Logger;
  /** The full name, once start() resolved the project (see subscriptionName). */
  private resolvedName: string | undefined;
  private readonly settlement: SettlementClient;
  private readonly settler: PubSubSettler;
  private maxDeferred = MIN_DEFAULT_DEFERRED;
  private readonly maxExtensionMs: number;
  private subscriptionFacts: SubscriptionFacts | undefined;
  private leaseSeconds = 10;
  private deadLetterTopic: Topic | undefined;
  private runtime: AdapterRuntime | undefined;
  private stream: SubscriberStream | undefined;
  private stopped = false;
  /** Received, not yet dispatched: waiting for a free slot or for their ordering key. */
  private readonly queue: PubSubDelivery[] = [];
  private readonly busyKeys = new Set<string>();
  /**
   * Dispatched deliveries that have not asked for their settlement yet, nor wait in a
   * batch for more messages. When none is left, no other ack can join the batch: it goes
   * at once (see notRunning()).
   */
  private readonly running = new Set<PubSubDelivery>();
  private pumping = false;
  /**
   * When a dispatch last started or ended: the clock of messages that wait for a slot
   * (keepQueuedLeases). Not running while the core paused for a store outage.
   */
  private lastProgressAt = Date.now();
  private paused = false;
  private leaseTimer: NodeJS.Timeout | undefined;
  private readonly internals: ClientInternals;

  constructor(
    broker: Record<string, unknown>,
    private readonly options: PubSubAdapterOptions,
  ) {
    this.settings = parsePubSubConfig(broker);
    this.maxExtensionMs = maxExtensionMsFor(
      this.settings,
      options.handlerTimeoutMs ?? CONSUMER_DEFAULTS.handlerTimeoutMs,
    );
    this.log = options.log;
    this.internals = new ClientInternals(() => this.stream?.client, this.log);
    this.ownsClient = this.settings.client === undefined;
    this.pubsub =
      this.settings.client ??
      new PubSub({
        ...(this.settings.projectId ? { projectId: this.settings.projectId } : {}),
        ...(this.settings.apiEndpoint ? { apiEndpoint: this.settings.apiEndpoint } : {}),
      });
    // Settlements go through their own unary client, built from the same options (the
    // emulator's plain-text channel included). The names it sends are built at start,
    // once the project is resolved: the client fills its placeholder only in its own calls.
    this.settlement = new SettlementClient(
      new v1.SubscriberClient(this.pubsub.options as ConstructorParameters<typeof v1.SubscriberClient>[0]),
      () => this.subscriptionName,
      options.settlementWindowMs,
    );
    const settler = new PubSubSettler({
      settlement: this.settlement,
      subscriptionName: () => this.subscriptionName,
      facts: () => this.subscriptionFacts,
      deadLetterTopic: () => this.deadLetterTopic,
      idAttributes: idAttributes(options.idStrategy),
      maxDeferred: () => this.maxDeferred,
      outstandingCapacity: () =>
        ((this.runtime?.concurrency ?? 1) + this.maxDeferred) * this.settings.maxStreams,
      get stats() {
        return stats;
      },
      log: this.log,
    });
    const stats: PubSubAdapterStats = {
      received: 0,
      staleAckIds: 0,
      deadLettered: 0,
      reconnects: 0,
      get deferred() {
        return settler.deferredCount;
      },
    };
    this.settler = settler;
    this.stats = stats;
  }

  /**
   * Each renewal sets the ack deadline to the lease length from the call; renewal stops
   * `maxExtensionMs` after dispatch (see PubSubBrokerConfig.maxExtensionMs).
   */
  get lease(): AdapterLease {
    return { extendByMs: this.leaseSeconds * 1000, maxTotalMs: this.maxExtensionMs };
  }

  /** The subscription's settings as read at start (and again before each stream reopen). */
  get facts(): SubscriptionFacts | undefined {
    return this.subscriptionFacts;
  }

  /** Whether the stream receives, how it ended last, and what waits at the service (see {@link PubSubAdapterHealth}). */
  get health(): PubSubAdapterHealth {
    return {
      ...(this.stream?.health ?? { receiving: false, reopening: false, streamEnds: 0 }),
      deferred: this.settler.deferredCount,
      parked: this.settler.parkedCount,
      stalled: this.settler.stalled,
    };
  }

  /**
   * The subscription's full name with the resolved project. Before start() resolved it
   * (nothing is received then), the configured name, for messages only.
   */
  private get subscriptionName(): string {
    return this.resolvedName ?? this.settings.subscription;
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    this.runtime = runtime;
    // First: every name built from here on (subscription, dead-letter topic, the copies'
    // source) carries the project, wherever it came from (README, "Where the project comes from").
    await resolveProject(this.pubsub);
    this.resolvedName = this.pubsub.subscription(this.settings.subscription).name;
    this.maxDeferred =
      this.settings.maxDeferredMessages ?? Math.max(MIN_DEFAULT_DEFERRED, runtime.concurrency);
    const facts = await readSubscriptionFacts(
      this.pubsub,
      this.subscriptionName,
      this.settings.connectTimeoutMs,
    );
    const refusal = notPullable(facts);
    if (refusal)
      throw new BrokerMisconfiguredError(`Pub/Sub subscription ${this.subscriptionName} ${refusal}`);
    this.leaseSeconds = this.settings.ackDeadlineSeconds ?? facts.ackDeadlineSeconds;
    this.useFacts(facts);
    if (this.deadLetterTopic) {
      await this.checkDeadLetterTopic(this.deadLetterTopic.name);
    } else {
      this.log.warn(
        `pubsub: ${this.subscriptionName} has no dead-letter topic (no broker.deadLetterTopic, no dead-letter policy): poison messages are parked, not dead-lettered`,
      );
    }
    const { maxAttempts } = this.options;
    const policy = facts.deadLetterPolicy;
    if (policy && maxAttempts !== undefined && policy.maxDeliveryAttempts <= maxAttempts) {
      this.log.warn(
        `pubsub: the dead-letter policy's maxDeliveryAttempts (${policy.maxDeliveryAttempts}) is not above maxAttempts (${maxAttempts}): Pub/Sub may forward messages (without a reason) before Oncely dead-letters them, and during a store outage`,
        { subscription: this.subscriptionName },
      );
    }
    this.stream = new SubscriberStream({
      pubsub: this.pubsub,
      subscriptionName: this.subscriptionName,
      subscriberOptions: () => this.subscriberOptions(runtime),
      onMessage: (message) => this.accept(message),
      onDiscarded: (message) => this.takeOver(message),
      // The subscription may have been deleted and recreated with other settings.
      beforeReopen: async () => {
        const now = await readSubscriptionFacts(
          this.pubsub,
          this.subscriptionName,
          this.settings.connectTimeoutMs,
        );
        const refusal = notPullable(now);
        // Made push (or an export) while it ran: no reopen can receive until it is pull again.
        if (refusal) this.log.error(`pubsub: subscription ${this.subscriptionName} ${refusal}`);
        this.useFacts(now);
      },
      onReopen: () => this.stats.reconnects++,
      reportError: (error, context) => runtime.reportError(error, context),
      log: this.log,
    });
    this.stream.open();
    // Messages waiting for a slot or for their ordering key are not under the core's
    // lease keeper yet: keep their leases here.
    this.leaseTimer = setInterval(
      () => this.keepQueuedLeases(),
      Math.max(100, (this.leaseSeconds * 1000) / 2),
    );
    this.leaseTimer.unref();
  }

  /** A store outage (the core stops dispatching): the wait for a slot is not a hang. */
  async pause(): Promise<void> {
    this.paused = true;
  }

  async resume(): Promise<void> {
    this.paused = false;
    this.lastProgressAt = Date.now();
  }

  /**
   * Stop: closes the stream at once (nothing new is fetched), then nacks what was received
   * but never dispatched. In-flight deliveries are still settled afterwards: settlements
   * do not go through the subscriber the close shuts.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.leaseTimer);
    const closing = this.stream?.close();
    const queued = this.queue.splice(0);
    // Nothing much is coming to share a request any more: every settlement from now on
    // (these nacks, once their receipt modAck was answered, and the in-flight acks) goes
    // without waiting out the window.
    this.settlement.sendImmediately();
    const handedBack = queued.map((delivery) => this.settler.release(delivery));
    await Promise.allSettled(handedBack);
    await closing?.catch((error: unknown) =>
      this.log.warn('pubsub: closing the subscriber failed', { error }),
    );
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.leaseTimer);
    await this.stream?.close().catch(() => {});
    this.stream?.dispose();
    await this.settlement.close();
    if (this.ownsClient) await this.pubsub.close();
  }

  /**
   * A dead-letter topic that does not exist is a misconfiguration found now, not when the
   * first poison message comes (its copy refused on every delivery, an ackFailed and a
   * redelivery every lease, for good). A check the service refuses (a consumer may publish
   * to a topic it is not allowed to read) is only a warning.
   */
  private async checkDeadLetterTopic(name: string): Promise<void> {
    const found = await topicExists(this.pubsub, name, this.settings.connectTimeoutMs);
    if (found === 'missing') {
      throw new BrokerMisconfiguredError(
        `the dead-letter topic ${name} (${this.settings.deadLetterTopic ? 'broker.deadLetterTopic' : "the subscription's dead-letter policy"}) does not exist: poison messages could not be dead-lettered`,
      );
    }
    if (found !== 'exists') {
      this.log.warn(`pubsub: could not check that the dead-letter topic ${name} exists`, {
        subscription: this.subscriptionName,
        error: found.unknown,
      });
    }
  }

  // ------------------------------------------------------------------------------------
  // Receiving
  // ------------------------------------------------------------------------------------

  /** The subscription's settings that may change while it runs (re-read before a reopen). */
  private useFacts(facts: SubscriptionFacts): void {
    this.subscriptionFacts = facts;
    const deadLetterTopic = this.settings.deadLetterTopic ?? facts.deadLetterPolicy?.deadLetterTopic;
    if (deadLetterTopic !== this.deadLetterTopic?.name) {
      this.deadLetterTopic = deadLetterTopic
        ? this.pubsub.topic(deadLetterTopic, { batching: { maxMilliseconds: 5 } })
        : undefined;
    }
  }

  private subscriberOptions(runtime: AdapterRuntime): SubscriberOptions {
    const deadline = Duration.from({ seconds: this.leaseSeconds });
    return {
      // The service sends at most this many outstanding (unsettled) messages per stream:
      // the handler slots plus a reserve for messages waiting out a backoff or parked,
      // which stay outstanding (see PubSubSettler). With the concurrency alone, one such
      // message stopped a consumer of concurrency 1. The adapter runs `concurrency` at a
      // time; the others wait in its queue, their leases kept.
      flowControl: { maxMessages: runtime.concurrency + this.maxDeferred, allowExcessMessages: false },
      streamingOptions: { maxStreams: this.settings.maxStreams },
      // The receipt modAck and the stream use the lease length (exactly-once would
      // raise the client's minimum to 60 s otherwise).
      minAckDeadline: deadline,
      maxAckDeadline: deadline,
      // The core's lease keeper is the only renewer: it stops at the handler timeout
      // and when leaseRenewal is off, and sees exactly-once renewal failures. With a
      // zero maxExtensionTime the client drops each message from its own lease
      // management at its first pass (it never extends on its own).
      maxExtensionTime: Duration.from({ seconds: 0 }),
      // The client's receipt modAck (the lease length) goes out within this window; a
      // deadline change of ours waits for its answer (see ClientInternals.receiptOf()).
      batching: { maxMilliseconds: RECEIPT_MODACK_BATCH_MS },
      // Close destroys the stream at once; the adapter nacks what it holds itself. (A
      // zero timeout, which maxExtensionTime 0 forces anyway, means the client never
      // emits 'close': SubscriberStream does not wait for it.)
      closeOptions: {
        behavior: SubscriptionCloseBehaviors.NackImmediately,
        timeout: Duration.from({ seconds: 0 }),
      },
    };
  }

  private accept(message: PubSubMessage): void {
    const receipt = this.internals.receiptOf(!!this.subscriptionFacts?.exactlyOnce);
    this.internals.takeFromClient(message);
    if (this.stopped) {
      // Arrived after stop(): hand it back at once.
      const leaseEnd = Date.now() + this.leaseSeconds * 1000;
      this.settlement.modAck(message.ackId, 0, () => leaseEnd).catch(() => {});
      return;
    }
    this.stats.received++;
    const delivery = new PubSubDelivery(
      message,
      toEnvelope(message, this.subscriptionName),
      {
        ack: (d) => this.settling(d, this.settler.ack(d)),
        modAck: (d, seconds) => {
          // A renewal is not a settlement; ModifyAckDeadline 0 (a release) is.
          if (seconds !== 0) return this.settler.renew(d, seconds);
          this.dropQueuedOfKey(d);
          return this.settling(d, this.settler.release(d));
        },
        retry: (d, delayMs) => {
          this.dropQueuedOfKey(d);
          return this.settling(d, this.settler.retry(d, delayMs));
        },
        deadLetter: (d, reason, detail) => this.settling(d, this.settler.deadLetter(d, reason, detail)),
        awaitingBatch: (d) => this.notRunning(d),
      },
      Date.now(),
      this.leaseSeconds * 1000,
      receipt,
    );
    this.queue.push(delivery);
    void this.pump();
  }

  /**
   * A message the client dropped after its receipt modAck failed (exactly-once): it holds
   * a slot of the stream's flow control until the stream's deadline (60 s) unless someone
   * settles it. The adapter sends its own receipt modAck (retried like any other, with the
   * ack ID) and takes the message as received; an invalid ack ID means it went out again.
   */
  private takeOver(message: PubSubMessage): void {
    // Retried for as long as the message may still be held: the stream's deadline, which
    // the client sets to 60 s with exactly-once (or the lease, if longer).
    const heldUntil = Date.now() + Math.max(EXACTLY_ONCE_STREAM_DEADLINE_MS, this.leaseSeconds * 1000);
    if (this.stopped) {
      // Stopping (the client drops what it held when it closes): hand it back if it can be.
      this.settlement.modAck(message.ackId, 0, () => heldUntil).catch(() => {});
      return;
    }
    this.settlement
      .modAck(message.ackId, this.leaseSeconds, () => heldUntil)
      .then(
        () => this.accept(message),
        (error: unknown) => {
          if (isOncelyError(error, 'LEASE_LOST')) return;
          this.log.warn(
            'pubsub: the receipt of a message the client dropped failed; it comes back after its deadline',
            { messageId: message.id, error },
          );
        },
      );
  }

  /** Dispatches queued deliveries while the core has free slots, one at a time per ordering key. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    const runtime = this.runtime!;
    try {
      while (!this.stopped && this.queue.some((d) => this.dispatchable(d))) {
        const free = await runtime.whenReady();
        if (free <= 0 || this.stopped) return;
        let started = 0;
        for (let i = 0; i < this.queue.length && started < free; ) {
          const delivery = this.queue[i]!;
          if (!this.dispatchable(delivery)) {
            i++;
            continue;
          }
          this.queue.splice(i, 1);
          started++;
          this.launch(delivery);
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  private dispatchable(delivery: PubSubDelivery): boolean {
    const key = delivery.orderingKey;
    return key === undefined || !this.busyKeys.has(key);
  }

  private launch(delivery: PubSubDelivery): void {
    // The core's lease keeper first renews half a lease after dispatch. A message that
    // waited for a slot, renewed every half lease meanwhile, may have barely more than
    // that left: renewed now, so the keeper's first renewal does not race its deadline.
    const leaseMs = this.leaseSeconds * 1000;
    if (delivery.leaseExpiresAt - Date.now() < leaseMs / 2 + DISPATCH_RENEWAL_MARGIN_MS) {
      delivery.extendLease(leaseMs).catch(() => {});
    }
    const key = delivery.orderingKey;
    if (key !== undefined) this.busyKeys.add(key);
    this.running.add(delivery);
    this.lastProgressAt = Date.now();
    void this.runtime!.dispatch(delivery).finally(() => {
      this.lastProgressAt = Date.now();
      this.running.delete(delivery);
      if (key !== undefined) this.busyKeys.delete(key);
      void this.pump();
    });
  }

  /**
   * `settlement`, after noting that `delivery` asked for it. The acks of the deliveries
   * that finish together share one Acknowledge request, batched over a few ms; once no
   * delivery is running any more, nothing else can join, so the batch goes now. Under
   * flow control (at most `concurrency` messages outstanding) the service sends no more
   * until acks arrive: every ms an ack waits is a ms the next message does not come.
   */
  private settling(delivery: PubSubDelivery, settlement: Promise<void>): Promise<void> {
    this.notRunning(delivery);
    return settlement;
  }

  /**
   * `delivery` asked for its settlement, or waits in a batch that may need more messages
   * to fill: those come only after the acks, so the held ones must not wait for it. Once
   * none is running, the batch goes: now when this was the last running one, at the end
   * of this turn when it was not (a committed batch's deliveries, which stopped running
   * when they joined it, ask one after the other and share the request).
   */
  private notRunning(delivery: PubSubDelivery): void {
    const wasRunning = this.running.delete(delivery);
    if (this.running.size > 0) return;
    if (wasRunning) this.settlement.flushNow();
    else this.settlement.flushSoon();
  }

  /**
   * On an ordering subscription, a nacked (or delayed) message brings every later message
   * of its key back (Pub/Sub ordering docs). The copies already received must not run
   * before it: they are dropped here, before the nack is sent (the service hands them
   * out again after it, with new ack IDs).
   */
  private dropQueuedOfKey(delivery: PubSubDelivery): void {
    const key = delivery.orderingKey;
    if (key === undefined || !this.subscriptionFacts?.messageOrdering) return;
    for (let i = this.queue.length - 1; i >= 0; i--) {
      if (this.queue[i]!.orderingKey === key) this.queue.splice(i, 1);
    }
  }

  /**
   * Renews the leases of the messages waiting for a slot or their ordering key, unless
   * nothing was dispatched and nothing finished for `maxExtensionMs` (the lease keeper's
   * cap) while the consumer ran: then every slot is held by a handler that hangs, and the
   * waiting messages are handed back for another consumer rather than held as long as it
   * hangs. (A store outage pauses the consumer, and this clock.)
   */
  private keepQueuedLeases(): void {
    if (this.queue.length > 0 && !this.paused && Date.now() - this.lastProgressAt >= this.maxExtensionMs) {
      const waiting = this.queue.splice(0);
      this.log.warn(
        `pubsub: no handler slot freed up for ${this.maxExtensionMs} ms (broker.maxExtensionMs): handing back the ${waiting.length} message(s) waiting for one`,
        { subscription: this.subscriptionName },
      );
      for (const delivery of waiting) this.settler.release(delivery).catch(() => {});
      return;
    }
    for (const delivery of [...this.queue]) {
      delivery.extendLease(this.leaseSeconds * 1000).catch((error: unknown) => {
        if (!isOncelyError(error, 'LEASE_LOST')) return;
        // Gone (exactly-once says so): the service hands it out again.
        const at = this.queue.indexOf(delivery);
        if (at >= 0) this.queue.splice(at, 1);
      });
    }
  }
}

/** Attributes a dead-letter copy must keep: the ones message IDs are read from. */
function idAttributes(strategy: IdStrategy | undefined): string[] {
  const named = typeof strategy === 'object' && strategy !== null ? [strategy.attribute] : [];
  return [...named, 'message-id'];
}
