import { type MessageAttributeValue, SQSClient, type Message as SqsMessage } from '@aws-sdk/client-sqs';
import {
  type AdapterLease,
  type AdapterRuntime,
  type BrokerAdapter,
  BrokerMisconfiguredError,
  ConfigError,
  type DeadLetterBacklog,
  type DeadLetterReason,
  type IdStrategy,
  isOncelyError,
  type Logger,
  pauseUnlessAborted,
} from '@oncely/core';
import {
  DEAD_LETTER_ATTRIBUTES,
  DEDUPLICATION_ID_ATTRIBUTE,
  deadLetterAttributes,
  MAX_MESSAGE_ATTRIBUTES,
  messageSize,
  originalAttributes,
} from './deadLetterAttributes.js';
import { isCredentialError, SqsOperationError } from './errors.js';
import { GroupSequencer } from './GroupSequencer.js';
import { MAX_TOTAL_VISIBILITY_MS, SqsDelivery } from './SqsDelivery.js';
import { type QueueFacts, SqsQueueClient } from './SqsQueueClient.js';
import { checkHeartbeat, parseSqsConfig, type SqsSettings } from './sqsConfig.js';
import { toEnvelope } from './toEnvelope.js';

/** Visibility used when neither the config nor the queue gives a usable one (the SQS default). */
const FALLBACK_VISIBILITY_MS = 30_000;

/** Request timeout beyond the long-poll wait, for clients the adapter builds itself. */
const REQUEST_TIMEOUT_MARGIN_S = 15;

/**
 * Where dead-lettered messages go:
 *
 * - `queue`: an explicit SendMessage (reason as a message attribute), then delete. The
 *   queue is `deadLetterQueueUrl` when configured, else the target of the queue's
 *   RedrivePolicy;
 * - `native-redrive`: the RedrivePolicy target could not be resolved to a URL (no
 *   permission for GetQueueUrl, for example): the message is released and SQS moves it
 *   itself once its receive count passes `maxReceiveCount` (the reason is only logged);
 * - `none`: no destination at all: the message is parked (visibility up to the 12-hour
 *   cap) and the dead-letter call fails, so it is counted (`ackFailed`) and never lost.
 *
 * @example
 * ```ts
 * if (adapter.deadLetterRoute.kind !== 'queue') console.warn('dead letters lose their reason');
 * ```
 */
export type DeadLetterRoute =
  | {
      kind: 'queue';
      url: string;
      fifo: boolean;
      origin: 'deadLetterQueueUrl' | 'RedrivePolicy';
      /** The target's MaximumMessageSize, when it could be read. */
      maxMessageBytes?: number;
    }
  | { kind: 'native-redrive'; maxReceiveCount: number }
  | { kind: 'none' };

/**
 * What `createAdapter` receives besides the broker section.
 *
 * @example
 * ```ts
 * const options: SqsAdapterOptions = { consumerName: 'payments', log: console, idStrategy: 'deduplication-id', maxAttempts: 5 };
 * ```
 */
export interface SqsAdapterOptions {
  consumerName: string;
  log: Logger;
  /**
   * The consumer's ID strategy. When given, `start()` refuses `'deduplication-id'` on a
   * standard queue or on a queue with content-based deduplication.
   * `createSqsConsumer` passes it; the core's `createConsumer` does not (yet).
   */
  idStrategy?: IdStrategy;
  /** The consumer's `maxAttempts`, to warn at start when SQS's own redrive would fire first. */
  maxAttempts?: number;
}

/**
 * Counters an application may export as metrics (`adapter.stats`).
 *
 * @example
 * ```ts
 * setInterval(() => gauge.set((adapter as SqsAdapter).stats.staleReceipts), 10_000);
 * ```
 */
export interface SqsAdapterStats {
  /** Messages received. */
  received: number;
  /** Settlements or lease renewals that met a stale receipt handle. */
  staleReceipts: number;
  /** Messages sent to the dead-letter queue. */
  deadLettered: number;
}

/**
 * The Amazon SQS adapter: a long-polling receive loop with bounded concurrency,
 * visibility heartbeats through the core's lease keeper, batched deletes after commit,
 * delayed retries through the visibility timeout, dead-lettering with a reason, and
 * per-group ordering on FIFO queues.
 *
 * Usually created by `createConsumer` (`broker.type: 'sqs'`) or `createSqsConsumer`.
 *
 * @example
 * ```ts
 * const adapter = new SqsAdapter({ type: 'sqs', queueUrl }, { consumerName: 'payments', log: console });
 * const consumer = new Consumer({ name: 'payments', broker: { type: 'sqs', queueUrl }, store, handler }, adapter);
 * await consumer.start();
 * ```
 */
export class SqsAdapter implements BrokerAdapter {
  readonly type = 'sqs';
  /** The queue URL (and the custom endpoint, if any), for the error of a failed start. */
  get address(): string {
    const { queueUrl, endpoint } = this.settings;
    return endpoint && !queueUrl.startsWith(endpoint) ? `${queueUrl} (endpoint ${endpoint})` : queueUrl;
  }
  readonly defaultIdStrategy: IdStrategy = { attribute: 'message-id' };
  readonly stats: SqsAdapterStats = { received: 0, staleReceipts: 0, deadLettered: 0 };

  private readonly settings: SqsSettings;
  private readonly client: SQSClient;
  private readonly ownsClient: boolean;
  private readonly queue: SqsQueueClient;
  private readonly log: Logger;
  private readonly sequencer: GroupSequencer<SqsDelivery>;
  private visibilityMs: number;
  /** Per ReceiveMessage call; decided at start, when the queue's type is known. */
  private maxMessages = 10;
  /** MessageAttributeNames of each receive: the configured ones plus the ID strategy's attribute. */
  private readonly attributeNames: string[];
  private queueFacts: QueueFacts | undefined;
  private route: DeadLetterRoute = { kind: 'none' };
  private runtime: AdapterRuntime | undefined;
  private loop: Promise<void> | undefined;
  private poll: AbortController | undefined;
  private capacityWaiters: Array<() => void> = [];

  constructor(
    broker: Record<string, unknown>,
    private readonly options: SqsAdapterOptions,
  ) {
    this.settings = parseSqsConfig(broker);
    this.log = options.log;
    this.ownsClient = this.settings.client === undefined;
    this.client =
      this.settings.client ??
      new SQSClient({
        endpoint: this.settings.endpoint,
        region: this.settings.region,
        credentials: this.settings.credentials,
        // A half-open connection must not stall the receive loop forever; the timeout has
        // to outlast the long poll itself. Without throwOnRequestTimeout the SDK only logs
        // a warning when it passes and waits on (for its 15-minute socket timeout).
        requestHandler: {
          requestTimeout: (this.settings.waitTimeSeconds + REQUEST_TIMEOUT_MARGIN_S) * 1000,
          connectionTimeout: 10_000,
          throwOnRequestTimeout: true,
        },
      });
    this.queue = new SqsQueueClient(this.client, this.settings.queueUrl);
    this.visibilityMs = this.settings.visibilityTimeoutMs ?? FALLBACK_VISIBILITY_MS;
    this.attributeNames = withIdAttribute(
      this.settings.messageAttributeNames,
      options.idStrategy ?? this.defaultIdStrategy,
    );
    this.sequencer = new GroupSequencer<SqsDelivery>({
      dispatch: (delivery) => this.runtime!.dispatch(delivery),
      onDone: () => this.releaseSlot(),
      extendByMs: () => this.visibilityMs,
      heartbeatIntervalMs: () => this.heartbeatMs,
      log: this.log,
    });
  }

  /**
   * Each heartbeat sets the visibility to `visibilityTimeoutMs` from the call; the keeper
   * stops at SQS's 12-hour total per receipt (the delivery also enforces the cap from
   * its own receipt time, which can be earlier than dispatch on FIFO queues).
   *
   * The core's keeper renews every `extendByMs / 2`, so `extendByMs` is declared as twice
   * `heartbeatIntervalMs` (by default that is the visibility timeout). The delivery pushes
   * the visibility by at least `visibilityTimeoutMs` whatever it is asked for.
   */
  get lease(): AdapterLease {
    return { extendByMs: 2 * this.heartbeatMs, maxTotalMs: MAX_TOTAL_VISIBILITY_MS };
  }

  /** How often held messages' visibility is renewed. */
  private get heartbeatMs(): number {
    return this.settings.heartbeatIntervalMs ?? this.visibilityMs / 2;
  }

  /** The dead-letter path chosen at start. */
  get deadLetterRoute(): DeadLetterRoute {
    return this.route;
  }

  /** The queue's attributes as read at start. */
  get facts(): QueueFacts | undefined {
    return this.queueFacts;
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    this.runtime = runtime;
    const facts = await this.queue.facts();
    this.queueFacts = facts;
    this.checkIdStrategy(facts);
    this.visibilityMs =
      this.settings.visibilityTimeoutMs ??
      (facts.visibilityTimeoutMs >= 1000 ? facts.visibilityTimeoutMs : FALLBACK_VISIBILITY_MS);
    if (this.settings.heartbeatIntervalMs !== undefined) {
      checkHeartbeat(this.settings.heartbeatIntervalMs, this.visibilityMs);
    }
    this.maxMessages = this.settings.maxMessages ?? (facts.fifo ? 1 : 10);
    this.route = await this.resolveDeadLetterRoute(facts);
    // One listener for the consumer's lifetime (not one per poll). By default the running
    // poll is left to answer (see stop()); with abortPollOnStop it is ended at once.
    runtime.stopping.addEventListener('abort', () => this.abortPollIfAsked(), { once: true });
    const { maxAttempts } = this.options;
    if (facts.redrive && maxAttempts !== undefined && facts.redrive.maxReceiveCount <= maxAttempts) {
      this.log.warn(
        `sqs: the queue's RedrivePolicy maxReceiveCount (${facts.redrive.maxReceiveCount}) is not above maxAttempts (${maxAttempts}): SQS may dead-letter messages (without a reason) before Oncely does, and during a store outage`,
        { queueUrl: this.settings.queueUrl },
      );
    }
    this.loop = this.receiveLoop(runtime).catch((error) => {
      this.log.error('sqs: receive loop ended unexpectedly', { error });
    });
  }

  // No pause()/resume(): during a store outage runtime.whenReady() blocks, so the loop
  // stops polling by itself. A poll already running is left to finish, because aborting
  // it can strand what SQS hands to the closed connection until the visibility timeout;
  // what it returns goes to the core, which holds and then releases it properly.

  /**
   * Stop: no new poll starts. The running one is left to answer (at most
   * `waitTimeSeconds`) and what it returns is released (visibility 0): a long poll the
   * client abandons keeps waiting on the server, which does not notice the closed
   * connection, and a message it hands out then would stay invisible for a whole
   * visibility timeout. With `abortPollOnStop` the poll is aborted at once instead, at
   * that risk. Messages received but not yet dispatched (FIFO messages waiting for their
   * group) are released now. A poll still unanswered `waitTimeSeconds + 15` s after
   * stop() began is on a dead or silent connection: it is aborted then, so stop() ends
   * even when the caller's own client has no request timeout.
   */
  async stop(): Promise<void> {
    this.abortPollIfAsked();
    this.wakeCapacityWaiters();
    const overdue = setTimeout(
      () => this.poll?.abort(),
      (this.settings.waitTimeSeconds + REQUEST_TIMEOUT_MARGIN_S) * 1000,
    );
    try {
      await this.loop;
    } finally {
      clearTimeout(overdue);
    }
    await this.sequencer.releaseWaiting();
  }

  private abortPollIfAsked(): void {
    if (this.settings.abortPollOnStop) this.poll?.abort();
  }

  async close(): Promise<void> {
    await this.queue.drain();
    if (this.ownsClient) this.client.destroy();
  }

  /**
   * The dead-letter queue's depth (the route chosen at start: `deadLetterQueueUrl` or the
   * RedrivePolicy target) from one GetQueueAttributes on the adapter's client: visible,
   * in flight and delayed messages all count, since a dead letter an `oncely dlq` pass is
   * reading (in flight) or that a DelaySeconds default holds back is still there. SQS's
   * counts are approximate. No oldest age: SQS reports `ApproximateAgeOfOldestMessage`
   * only as a CloudWatch metric, and a receive to find it would change what it measures.
   * Undefined when the dead letters have no queue URL (`native-redrive`, `none`).
   */
  async deadLetterBacklog(signal: AbortSignal): Promise<DeadLetterBacklog | undefined> {
    const route = this.route;
    if (route.kind !== 'queue') return undefined;
    return { depth: await this.queue.messageCount(route.url, signal), queue: route.url };
  }

  // ------------------------------------------------------------------------------------
  // Receiving
  // ------------------------------------------------------------------------------------

  private async receiveLoop(runtime: AdapterRuntime): Promise<void> {
    let failures = 0;
    for (;;) {
      const free = await runtime.whenReady();
      if (free <= 0 || runtime.stopping.aborted) return;
      // `free` counts the core's handler slots. FIFO messages waiting behind their group
      // take none: counting them would starve the polls of other groups, whose messages
      // could run now. They are bounded on their own: at most `concurrency` wait at a
      // time, and a receive never brings more than that bound can still take.
      const room = runtime.concurrency - this.sequencer.waitingCount;
      if (room <= 0) {
        await this.capacityFreed(runtime.stopping);
        continue;
      }
      const max = Math.min(this.maxMessages, free, room);
      const poll = new AbortController();
      this.poll = poll;
      const { signal } = poll;
      // SQS starts a message's clock when it hands it out, somewhere during the long
      // poll: the 12-hour cap is counted from before the call (the safe side), the first
      // expiry from its answer (a message that arrives late in the poll has its whole
      // visibility left, and the first renewal is scheduled from dispatch).
      const requestedAt = Date.now();
      let messages: SqsMessage[];
      try {
        messages = await this.queue.receive({
          max,
          visibilitySeconds: this.visibilityMs / 1000,
          waitSeconds: this.settings.waitTimeSeconds,
          signal,
          attributeNames: this.attributeNames,
        });
        failures = 0;
      } catch (error) {
        if (signal.aborted) continue;
        failures++;
        // Refused credentials do not heal in milliseconds (a token to refresh, a key to
        // rotate): wait longer than for a network blip, as sqs-consumer does.
        const credentials = isCredentialError(error);
        const pause = credentials
          ? this.settings.authErrorBackoffMs
          : Math.min(5000, 100 * 2 ** Math.min(failures, 6));
        runtime.reportError(
          error,
          `ReceiveMessage failed${credentials ? ' (credentials refused)' : ''}; polling again in ${pause} ms`,
        );
        await pauseUnlessAborted(pause, runtime.stopping);
        continue;
      } finally {
        if (this.poll === poll) this.poll = undefined;
      }
      const respondedAt = Date.now();
      if (runtime.stopping.aborted) {
        // Answered after stop() began: give it all back now rather than hold it a visibility.
        await this.releaseUnaccepted(messages);
        return;
      }
      for (const message of messages) this.accept(message, requestedAt, respondedAt);
      // Nothing there: pause before asking again (a short poll would otherwise spin).
      if (messages.length === 0 && this.settings.pollingWaitTimeMs > 0) {
        await pauseUnlessAborted(this.settings.pollingWaitTimeMs, runtime.stopping);
      }
    }
  }

  private async releaseUnaccepted(messages: SqsMessage[]): Promise<void> {
    await Promise.all(
      messages.map((message) =>
        this.queue.changeVisibility(message.ReceiptHandle ?? '', 0).catch((error) => {
          this.log.warn(
            'sqs: could not release a message received while stopping; it returns after its visibility timeout',
            {
              error,
              brokerMessageId: message.MessageId,
            },
          );
        }),
      ),
    );
  }

  private accept(message: SqsMessage, requestedAt: number, respondedAt: number): void {
    this.stats.received++;
    const envelope = toEnvelope(message, {
      source: this.settings.queueUrl,
      contentBasedDeduplication: this.queueFacts?.contentBasedDeduplication ?? false,
    });
    const delivery = new SqsDelivery(
      message,
      envelope,
      {
        changeVisibility: (handle, seconds) => this.counted(this.queue.changeVisibility(handle, seconds)),
        renewVisibility: (handle, seconds, signal) =>
          this.counted(this.queue.renewVisibility(handle, seconds, signal)),
        delete: (handle) => this.counted(this.queue.delete(handle)),
        deadLetter: (d, reason, detail) => this.counted(this.deadLetter(d, reason, detail)),
      },
      requestedAt,
      respondedAt,
      this.visibilityMs,
    );
    this.sequencer.submit(delivery);
  }

  /** Counts and logs stale receipt handles; the rejection still reaches the core. */
  private async counted(call: Promise<void>): Promise<void> {
    try {
      await call;
    } catch (error) {
      if (isOncelyError(error, 'LEASE_LOST')) {
        this.stats.staleReceipts++;
        this.log.warn('sqs: stale receipt handle (visibility lapsed or message gone)', { error });
      }
      throw error;
    }
  }

  private releaseSlot(): void {
    this.wakeCapacityWaiters();
  }

  private capacityFreed(stopping: AbortSignal): Promise<void> {
    if (stopping.aborted) return Promise.resolve();
    return new Promise((resolve) => this.capacityWaiters.push(resolve));
  }

  private wakeCapacityWaiters(): void {
    for (const wake of this.capacityWaiters.splice(0)) wake();
  }

  // ------------------------------------------------------------------------------------
  // Start-time checks
  // ------------------------------------------------------------------------------------

  private checkIdStrategy(facts: QueueFacts): void {
    if (this.options.idStrategy !== 'deduplication-id') return;
    if (!facts.fifo) {
      throw new ConfigError(
        'idStrategy',
        `is 'deduplication-id' but ${this.settings.queueUrl} is a standard queue: only FIFO queues carry a MessageDeduplicationId`,
      );
    }
    if (facts.contentBasedDeduplication) {
      throw new BrokerMisconfiguredError(
        `idStrategy 'deduplication-id' is refused: ${this.settings.queueUrl} uses content-based deduplication, so the ID is a hash of the body and two different messages with the same body would be treated as one. Use a message attribute ({ attribute: 'message-id' }) instead.`,
      );
    }
  }

  private async resolveDeadLetterRoute(facts: QueueFacts): Promise<DeadLetterRoute> {
    const configured = this.settings.deadLetterQueueUrl;
    if (configured) {
      const target = await this.queue.facts(configured);
      if (facts.fifo !== target.fifo) {
        this.log.warn(
          `sqs: dead-letter queue ${configured} is ${target.fifo ? 'FIFO' : 'standard'} but ${this.settings.queueUrl} is ${facts.fifo ? 'FIFO' : 'standard'}`,
        );
      }
      return {
        kind: 'queue',
        url: configured,
        fifo: target.fifo,
        origin: 'deadLetterQueueUrl',
        maxMessageBytes: target.maximumMessageSize,
      };
    }
    if (facts.redrive) {
      try {
        const url = await this.queue.urlOfArn(facts.redrive.deadLetterTargetArn);
        // Its size limit is a nicety (the send falls back without it): no permission is fine.
        const target = await this.queue.facts(url).catch(() => undefined);
        return {
          kind: 'queue',
          url,
          fifo: url.endsWith('.fifo'),
          origin: 'RedrivePolicy',
          maxMessageBytes: target?.maximumMessageSize,
        };
      } catch (error) {
        this.log.warn(
          `sqs: cannot resolve the RedrivePolicy target ${facts.redrive.deadLetterTargetArn} to a URL; dead-lettered messages are left to SQS's own redrive (after ${facts.redrive.maxReceiveCount} receives, without a reason). Set broker.deadLetterQueueUrl to send them with their reason.`,
          { error },
        );
        return { kind: 'native-redrive', maxReceiveCount: facts.redrive.maxReceiveCount };
      }
    }
    this.log.warn(
      `sqs: ${this.settings.queueUrl} has no dead-letter destination (no broker.deadLetterQueueUrl, no RedrivePolicy): poison messages are parked, not dead-lettered`,
    );
    return { kind: 'none' };
  }

  // ------------------------------------------------------------------------------------
  // Dead-lettering
  // ------------------------------------------------------------------------------------

  private async deadLetter(delivery: SqsDelivery, reason: DeadLetterReason, detail: string): Promise<void> {
    const route = this.route;
    switch (route.kind) {
      case 'queue': {
        const { message } = delivery;
        const body = message.Body ?? '';
        const attributes = this.deadLetterCopyAttributes(
          message,
          reason,
          detail,
          route.maxMessageBytes,
          delivery.envelope.deduplicationId,
        );
        if (route.maxMessageBytes !== undefined && messageSize(body, attributes) > route.maxMessageBytes) {
          // Even the bare copy is too big (the DLQ's MaximumMessageSize is below the source
          // queue's): no retry can send it. Park it like a message with no destination.
          await this.park(delivery);
          throw new BrokerMisconfiguredError(
            `cannot dead-letter (${reason}: ${detail}): the message (${messageSize(body, attributes)} bytes) is over the MaximumMessageSize of ${route.url} (${route.maxMessageBytes}); it is parked. Raise the dead-letter queue's MaximumMessageSize.`,
          );
        }
        const send = (messageAttributes: Record<string, MessageAttributeValue>) =>
          this.queue.sendTo({
            QueueUrl: route.url,
            MessageBody: body,
            MessageAttributes: messageAttributes,
            ...(route.fifo
              ? {
                  MessageGroupId: delivery.envelope.orderingKey ?? 'oncely-dead-letter',
                  // A retried dead-letter (crash between send and delete) is dropped by the
                  // FIFO dead-letter queue's own 5-minute deduplication.
                  MessageDeduplicationId: message.MessageId,
                }
              : {}),
          });
        try {
          await send(attributes);
        } catch (error) {
          // A size limit we could not read: SQS answers InvalidParameterValue. The original
          // attributes alone fit wherever the original did, so try once more without ours
          // rather than fail the same way on every redelivery.
          const bare = originalAttributes(message);
          if (!(error instanceof SqsOperationError && error.sqsCode === 'InvalidParameterValue')) throw error;
          if (Object.keys(bare).length === Object.keys(attributes).length) throw error;
          this.log.warn(
            'sqs: the dead-lettered copy was refused; sending it without its oncely-* attributes',
            {
              error,
              reason,
              detail,
              brokerMessageId: message.MessageId,
            },
          );
          await send(bare);
        }
        this.stats.deadLettered++;
        // Not batched: the copy exists now, so the window in which it and the original
        // both exist stays as short as one request.
        await this.queue.deleteNow(delivery.receiptHandle);
        return;
      }
      case 'native-redrive': {
        // SQS moves it once ApproximateReceiveCount passes maxReceiveCount, which takes one
        // more receive per count. Visibility 0 would spin it through those receives (and
        // this consumer's store) at once; a visibility timeout per receive paces them like
        // a consumer that crashed on it.
        const seconds = Math.max(
          0,
          Math.min(Math.ceil(this.visibilityMs / 1000), delivery.secondsLeftUnderCap()),
        );
        this.log.warn(
          `sqs: leaving the message to SQS's redrive (after ${route.maxReceiveCount} receives, one every ${seconds} s)`,
          { reason, detail, brokerMessageId: delivery.message.MessageId },
        );
        await this.queue.changeVisibility(delivery.receiptHandle, seconds);
        return;
      }
      case 'none': {
        const seconds = await this.park(delivery);
        throw new BrokerMisconfiguredError(
          `cannot dead-letter (${reason}: ${detail}): ${this.settings.queueUrl} has no dead-letter destination; the message is parked for ${seconds} s. Configure broker.deadLetterQueueUrl or a RedrivePolicy.`,
        );
      }
    }
  }

  /** Park a message as long as SQS allows: never processed unprotected, never dropped. Returns the seconds. */
  private async park(delivery: SqsDelivery): Promise<number> {
    const seconds = Math.max(
      0,
      Math.floor((delivery.receivedAt + MAX_TOTAL_VISIBILITY_MS - 5000 - Date.now()) / 1000),
    );
    await this.queue.changeVisibility(delivery.receiptHandle, seconds).catch(() => {});
    return seconds;
  }

  /** {@link deadLetterAttributes}, with a warning when the reason did not fit. */
  private deadLetterCopyAttributes(
    message: SqsMessage,
    reason: DeadLetterReason,
    detail: string,
    maxMessageBytes: number | undefined,
    deduplicationId: string | undefined,
  ): Record<string, MessageAttributeValue> {
    const attributes = deadLetterAttributes(message, reason, detail, maxMessageBytes, deduplicationId);
    if (attributes[DEAD_LETTER_ATTRIBUTES.reason]?.StringValue !== reason) {
      this.log.warn(
        `sqs: the dead-lettered copy has no room for ${DEAD_LETTER_ATTRIBUTES.reason} (SQS allows ${MAX_MESSAGE_ATTRIBUTES} attributes, and the dead-letter queue's MaximumMessageSize bounds body plus attributes)`,
        { reason, detail, brokerMessageId: message.MessageId },
      );
    }
    return attributes;
  }
}

/**
 * The ID is read from a message attribute under the default strategy: a list of
 * attributes to fetch that leaves it out would make every message `missing-id`.
 */
function withIdAttribute(names: string[], strategy: IdStrategy): string[] {
  if (names.includes('All') || names.includes('.*')) return ['All'];
  // A replayed dead letter carries its original deduplication ID as an attribute.
  if (strategy === 'deduplication-id' && !names.includes(DEDUPLICATION_ID_ATTRIBUTE))
    return [...names, DEDUPLICATION_ID_ATTRIBUTE];
  if (typeof strategy !== 'object' || names.includes(strategy.attribute)) return names;
  return [...names, strategy.attribute];
}
