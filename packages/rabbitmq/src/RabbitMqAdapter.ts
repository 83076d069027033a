import {
  type AdapterOptions,
  type AdapterRuntime,
  type BrokerAdapter,
  BrokerMisconfiguredError,
  type DeadLetterBacklog,
  type DeadLetterReason,
  type IdStrategy,
  type Logger,
  redactSecrets,
} from '@oncely/core';
import {
  type Channel,
  type ChannelModel,
  type ConfirmChannel,
  type ConsumeMessage,
  connect,
  type Message,
  type Options,
} from 'amqplib';
import { ConfirmedPublisher } from './ConfirmedPublisher.js';
import { closeQuietly } from './closeQuietly.js';
import { consumerTimeoutFindings } from './consumerTimeout.js';
import { DeliveryChannel } from './DeliveryChannel.js';
import {
  ATTEMPTS_HEADER,
  CONSUMER_HEADER,
  type CountingRules,
  copyHeaders,
  DEAD_LETTERED_AT_HEADER,
  DETAIL_HEADER,
  REASON_HEADER,
  SOURCE_QUEUE_HEADER,
  toEnvelope,
} from './envelope.js';
import {
  AMQP_ACCESS_REFUSED,
  AMQP_NOT_FOUND,
  AMQP_PRECONDITION_FAILED,
  amqpReplyCode,
  RabbitMqOperationError,
} from './errors.js';
import type { ResolvedOptions } from './options.js';
import { type CopyPublisher, RabbitMqDelivery } from './RabbitMqDelivery.js';
import { declareTopology, delayQueueName, delayQueueOptions, retryDelayBucket } from './topology.js';

/** Unacked deliveries a quorum queue hands one consumer at most (RabbitMQ docs, confirms.md). */
const QUORUM_PREFETCH_CAP = 2000;
/** Dead-letter details are cut to this many characters (AMQP header tables are small). */
const MAX_DETAIL_CHARS = 2000;
/**
 * After a passive declare of the dead-letter queue found it missing (404, which also
 * closes the channel), the dead-letter gauges' calls refused at once before the next
 * look: at the default 60 s export interval, about 10 minutes without a channel opened
 * and refused per collection.
 */
const MISSING_DLQ_SKIPPED_CALLS = 10;

/** The consumer's name, logger and limits (the handler timeout feeds the consumer-timeout check). */
export type RabbitMqAdapterOptions = AdapterOptions;

/**
 * The RabbitMQ (amqplib) {@link BrokerAdapter}: a push consumer with manual acks and
 * `prefetch` bounding what is in flight; retry through per-delay TTL queues (or
 * `basic.reject` requeue); dead letters published with the reason in headers;
 * reconnection with backoff; settlement only through the channel that delivered.
 *
 * Built by `createAdapter` (for `createConsumer`) or `createRabbitMqConsumer`.
 *
 * @example
 * ```ts
 * const adapter = new RabbitMqAdapter(parseBrokerOptions({ type: 'rabbitmq', url, queue: 'payments' }), { consumerName: 'payments', log: stderrLogger });
 * const consumer = new Consumer({ name: 'payments', broker: { type: 'rabbitmq', url, queue: 'payments' }, store, handler }, adapter);
 * ```
 */
export class RabbitMqAdapter implements BrokerAdapter, CopyPublisher {
  readonly type = 'rabbitmq';
  /** The node URLs, passwords redacted (core puts it in the error of a failed start). */
  get address(): string {
    return this.options.urls.map(redactSecrets).join(', ');
  }
  readonly defaultIdStrategy: IdStrategy = 'producer';
  readonly retryMode: 'topology' | 'requeue';

  private runtime: AdapterRuntime | undefined;
  private log: Logger;
  private prefetch = 1;
  private readonly rules: CountingRules;

  private connection: ChannelModel | undefined;
  private current: DeliveryChannel | undefined;
  private generation = 0;
  private publisher: ConfirmedPublisher | undefined;
  private publisherOpening: Promise<ConfirmedPublisher> | undefined;

  /** Deliveries pushed by the broker, waiting for a free handler slot. */
  private readonly buffered: RabbitMqDelivery[] = [];
  private pumping = false;

  private paused = false;
  private stopped = false;
  private closed = false;
  /** Serializes pause / resume / stop so a cancel and a consume never cross. */
  private control: Promise<void> = Promise.resolve();
  private recoveryTimer: NodeJS.Timeout | undefined;
  private recovering = false;
  private recoveryAttempt = 0;
  private readonly requeueTimers = new Set<NodeJS.Timeout>();
  private serverVersionText: string | undefined;
  /** The channel the dead-letter gauges' passive declares use, while it is open. */
  private backlogChannel: Promise<Channel> | undefined;
  /** Gauge calls still to refuse without asking the broker, after the DLQ was found missing. */
  private missingDlqSkips = 0;
  /** Index of the `url` the next connect tries first. */
  private nextUrl = 0;

  constructor(
    readonly options: ResolvedOptions,
    private readonly adapterOptions: RabbitMqAdapterOptions,
  ) {
    this.log = adapterOptions.log;
    this.retryMode = options.retry;
    this.rules = { queue: options.queue, queueType: options.queueType, retry: options.retry };
  }

  /** The server's version (`'3.10.8'`), once connected. */
  get serverVersion(): string | undefined {
    return this.serverVersionText;
  }

  /** Generation of the current consumer channel (1 for the first), 0 before the first. */
  get channelGeneration(): number {
    return this.current?.alive ? this.current.generation : 0;
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    this.runtime = runtime;
    this.log = runtime.log;
    this.prefetch = this.options.prefetch ?? runtime.concurrency;
    const connection = await this.openConnection();
    try {
      this.checkConsumerTimeout(runtime);
      this.checkQuorumLimits();
      await this.prepareTopology(connection, true);
      await this.openConsumerChannel(connection);
    } catch (error) {
      this.connection = undefined;
      await closeQuietly(connection);
      throw error;
    }
  }

  pause(): Promise<void> {
    return this.serialize(async () => {
      this.paused = true;
      await this.cancelConsumer();
      // Fail closed: what waits for a slot goes back to the queue now instead of waiting
      // out the outage unacked (and counting toward consumer_timeout).
      this.releaseBuffered();
    });
  }

  resume(): Promise<void> {
    return this.serialize(async () => {
      this.paused = false;
      const current = this.current;
      if (current?.alive && current.consumerTag === undefined && !this.stopped) await this.consumeOn(current);
    });
  }

  stop(): Promise<void> {
    return this.serialize(async () => {
      this.stopped = true;
      clearTimeout(this.recoveryTimer);
      this.recoveryTimer = undefined;
      await this.cancelConsumer();
      this.releaseBuffered();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.stopped = true;
    clearTimeout(this.recoveryTimer);
    this.recoveryTimer = undefined;
    for (const timer of this.requeueTimers) clearTimeout(timer);
    this.requeueTimers.clear();
    const connection = this.connection;
    this.connection = undefined;
    // Closed with the connection below.
    this.backlogChannel = undefined;
    const current = this.current;
    this.current = undefined;
    current?.markClosed();
    // Close the consumer channel first: amqplib buffers frames per channel, and a
    // connection.close can reach the broker before acks still buffered on a channel, which
    // the broker then drops (and redelivers those messages). The close resolves after the
    // broker's close-ok, which follows every frame sent before it on that channel (or once
    // the connection is gone, when the broker requeues what was unacked anyway).
    if (current) await closeQuietly(current.channel);
    if (this.publisher) await closeQuietly(this.publisher.channel);
    // Closing the connection closes what is left; the broker requeues whatever is unacked.
    if (connection) await closeQuietly(connection);
  }

  /**
   * The dead-letter queue's ready messages, from a passive declare (`queue.declare-ok`'s
   * message count) on a channel of the consumer's connection, kept between collections.
   * Messages an `oncely dlq` pass holds unacked are not in that count. No oldest age: AMQP
   * reports none, and a `basic.get` to look would redeliver the message it took.
   * Rejects while the connection is down (the gauges skip that collection). A missing
   * queue (404) closes the channel: the next {@link MISSING_DLQ_SKIPPED_CALLS} calls then
   * reject at once without asking the broker, rather than open a channel each time.
   */
  async deadLetterBacklog(): Promise<DeadLetterBacklog> {
    const queue = this.options.deadLetterQueue;
    const connection = this.connection;
    if (!connection || this.closed) throw new Error('not connected to RabbitMQ');
    if (this.missingDlqSkips > 0) {
      this.missingDlqSkips--;
      throw new Error(
        `the dead-letter queue '${queue}' did not exist at the last look (404); looking again in ${this.missingDlqSkips + 1} collection(s)`,
      );
    }
    this.backlogChannel ??= this.openBacklogChannel(connection);
    const channel = await this.backlogChannel;
    try {
      const { messageCount } = await channel.checkQueue(queue);
      return { depth: messageCount, queue };
    } catch (error) {
      if ((error as { code?: unknown }).code !== 404) throw error;
      this.missingDlqSkips = MISSING_DLQ_SKIPPED_CALLS;
      throw new Error(
        `the dead-letter queue '${queue}' does not exist (404); looking again after ${MISSING_DLQ_SKIPPED_CALLS} collections`,
        { cause: error },
      );
    }
  }

  private openBacklogChannel(connection: ChannelModel): Promise<Channel> {
    const forget = () => {
      if (this.backlogChannel === opening) this.backlogChannel = undefined;
    };
    const opening = connection.createChannel().then((channel) => {
      // A refused passive declare (the queue was deleted) closes the channel, with an
      // 'error' event besides the rejection; so does a lost connection. The next
      // collection opens a new one.
      channel.on('error', () => {});
      channel.on('close', forget);
      return channel;
    });
    opening.catch(forget);
    return opening;
  }

  // ------------------------------------------------------------------------------------
  // Connection and channels
  // ------------------------------------------------------------------------------------

  private async openConnection(): Promise<ChannelModel> {
    const connectionName =
      this.options.connectionName ?? `oncely:${this.adapterOptions.consumerName}:${this.options.queue}`;
    const connection = await this.connectToAny(connectionName);
    if (this.closed) {
      await closeQuietly(connection);
      throw new RabbitMqOperationError('connect', 'the adapter was closed while connecting');
    }
    this.connection = connection;
    this.serverVersionText = serverVersionOf(connection);
    connection.on('error', (error: Error) => this.report(error, 'connection error'));
    connection.on('close', (error?: Error) => this.onConnectionClosed(connection, error));
    connection.on('blocked', (reason: string) =>
      this.log.warn('RabbitMQ blocked the connection (resource alarm): publishes wait', { reason }),
    );
    connection.on('unblocked', () => this.log.info('RabbitMQ unblocked the connection'));
    return connection;
  }

  /**
   * Connects to the first of `url`s that answers, starting after the one used last, so a
   * cluster node that went away is not tried first again.
   */
  private async connectToAny(connectionName: string): Promise<ChannelModel> {
    const { urls } = this.options;
    let lastError: unknown;
    for (let tried = 0; tried < urls.length; tried++) {
      const url = urls[this.nextUrl % urls.length]!;
      this.nextUrl = (this.nextUrl + 1) % urls.length;
      try {
        return await connect(connectionUrl(url, this.options.heartbeatSeconds), {
          ...this.options.socketOptions,
          clientProperties: { connection_name: connectionName },
        });
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  }

  /** Declares (assertQueue) or checks the topology; turns broker refusals into a clear misconfiguration. */
  private async prepareTopology(connection: ChannelModel, firstTime: boolean): Promise<void> {
    const { options } = this;
    if (options.assertQueue) {
      await withThrowawayChannel(connection, (channel) => declareTopology(channel, options)).catch(
        (error) => {
          throw misconfigured(error, options);
        },
      );
      return;
    }
    if (!firstTime) return;
    const checks: Array<[string, (channel: ConfirmChannel) => Promise<unknown>]> = [
      [`queue '${options.queue}'`, (channel) => channel.checkQueue(options.queue)],
      [
        `dead-letter exchange '${options.deadLetterExchange}'`,
        (channel) => channel.checkExchange(options.deadLetterExchange),
      ],
      ...(options.retry === 'topology'
        ? (options.retryDelaysMs ?? []).map(
            (delay): [string, (channel: ConfirmChannel) => Promise<unknown>] => {
              const name = delayQueueName(options.queue, delay);
              return [`delay queue '${name}'`, (channel) => channel.checkQueue(name)];
            },
          )
        : []),
    ];
    for (const [what, check] of checks) {
      // A failed passive declare closes the channel: one channel per check.
      await withThrowawayChannel(connection, check).catch((error) => {
        if (amqpReplyCode(error) === AMQP_NOT_FOUND) {
          throw new BrokerMisconfiguredError(
            `${what} does not exist and broker.assertQueue is false: declare it with assertTopology() or set assertQueue: true`,
            { cause: error },
          );
        }
        throw error;
      });
    }
  }

  private async openConsumerChannel(connection: ChannelModel): Promise<void> {
    const channel = await connection.createChannel();
    const current = new DeliveryChannel(channel, ++this.generation);
    channel.on('error', (error: Error) => this.report(error, `consumer channel ${current.generation} error`));
    channel.on('close', () => this.onConsumerChannelClosed(current));
    await channel.prefetch(this.prefetch, false);
    this.current = current;
    if (this.paused || this.stopped) return;
    // After a reconnect, handlers of the old channel may still hold every slot; the broker
    // does not count their deliveries against the new channel's prefetch. Consuming now
    // would take messages this consumer cannot start (and that an idle competitor could),
    // so the consumer comes back once a slot is free.
    if (this.runtime && (await this.runtime.whenReady()) === 0) return;
    // Consume inside the same serialization as pause/resume/stop: a resume() during the
    // wait above may already have consumed on this channel, and a second basic.consume
    // would leave two consumers, of which stop() cancels only the one it knows.
    await this.serialize(async () => {
      if (!current.alive || this.current !== current || this.paused || this.stopped) return;
      if (current.consumerTag !== undefined) return;
      await this.consumeOn(current);
    });
  }

  /** Only ever called inside {@link serialize}, so at most one consumer exists per channel. */
  private async consumeOn(current: DeliveryChannel): Promise<void> {
    const { consumerPriority, consumeArguments } = this.options;
    const { consumerTag } = await current.channel.consume(
      this.options.queue,
      (msg) => this.onMessage(current, msg),
      {
        noAck: false,
        ...(consumerPriority !== undefined ? { priority: consumerPriority } : {}),
        ...(Object.keys(consumeArguments).length > 0 ? { arguments: { ...consumeArguments } } : {}),
      },
    );
    current.consumerTag = consumerTag;
    // pause() or stop() may have run while the consume was on the wire.
    if (this.paused || this.stopped) await this.cancelConsumer();
  }

  private async cancelConsumer(): Promise<void> {
    const current = this.current;
    const tag = current?.consumerTag;
    if (!current || tag === undefined) return;
    current.consumerTag = undefined;
    if (!current.alive) return;
    await current.channel.cancel(tag).catch((error) => this.report(error, 'cancelling the consumer failed'));
  }

  private onConnectionClosed(connection: ChannelModel, error: Error | undefined): void {
    if (this.connection !== connection) return;
    this.connection = undefined;
    this.current?.markClosed();
    if (this.closed || this.stopped) return;
    this.report(error ?? new Error('connection closed'), 'connection lost; reconnecting');
    this.scheduleRecovery();
  }

  private onConsumerChannelClosed(closed: DeliveryChannel): void {
    closed.markClosed();
    if (this.current !== closed) return;
    this.current = undefined;
    if (this.closed || this.stopped) return;
    this.scheduleRecovery();
  }

  private scheduleRecovery(): void {
    if (this.recoveryTimer || this.recovering || this.closed || this.stopped) return;
    const { reconnectInitialMs, reconnectMaxMs } = this.options;
    const base = Math.min(reconnectMaxMs, reconnectInitialMs * 2 ** Math.min(this.recoveryAttempt, 30));
    // Jitter so that many consumers cut off by one broker restart do not reconnect in step.
    const delay = Math.min(reconnectMaxMs, Math.round(base * (0.8 + Math.random() * 0.4)));
    this.recoveryAttempt++;
    this.recoveryTimer = setTimeout(() => {
      this.recoveryTimer = undefined;
      void this.recover();
    }, delay);
  }

  /** Reconnects (if the connection is gone) and re-creates the consumer on a new channel. */
  private async recover(): Promise<void> {
    if (this.closed || this.stopped) return;
    this.recovering = true;
    try {
      let connection = this.connection;
      if (!connection) connection = await this.openConnection();
      // Declare again (assertQueue) after any loss, not only a lost connection: the broker
      // may have restarted and lost non-durable state, or the queue was deleted (the broker
      // then cancels the consumer, and consuming from a missing queue fails with 404).
      await this.prepareTopology(connection, false);
      if (!this.current && !this.stopped) await this.openConsumerChannel(connection);
      if (!this.stopped && !this.current?.alive) {
        throw new RabbitMqOperationError(
          'consume',
          'the new channel closed while the consumer was being set up',
        );
      }
      this.recoveryAttempt = 0;
      this.log.info('RabbitMQ consumer recovered', { queue: this.options.queue, channel: this.generation });
    } catch (error) {
      this.report(error, 'reconnecting failed; retrying');
      this.recovering = false;
      this.scheduleRecovery();
      return;
    }
    this.recovering = false;
  }

  // ------------------------------------------------------------------------------------
  // Deliveries
  // ------------------------------------------------------------------------------------

  private onMessage(current: DeliveryChannel, msg: ConsumeMessage | null): void {
    if (msg === null) {
      // basic.cancel from the broker: the queue was deleted, or (RabbitMQ 4.3+) a delivery
      // outlived consumer_timeout and the broker returned the consumer's messages. Retire
      // the channel (its unacked deliveries are requeued) and consume again on a new one.
      current.consumerTag = undefined;
      this.report(
        new RabbitMqOperationError(
          'consume',
          `the broker cancelled the consumer on queue '${this.options.queue}'`,
        ),
        'consumer cancelled by the broker; re-creating it',
      );
      void closeQuietly(current.channel);
      return;
    }
    const delivery = new RabbitMqDelivery(this, current, msg, toEnvelope(msg, this.rules));
    this.buffered.push(delivery);
    if (!this.pumping) void this.pump();
  }

  /**
   * Hands buffered deliveries to the core as handler slots free up. With `prefetch` equal
   * to the concurrency (the default) a slot is always free when a delivery arrives; with
   * a larger prefetch the surplus waits here, unacked.
   */
  private async pump(): Promise<void> {
    const runtime = this.runtime;
    if (!runtime) return;
    this.pumping = true;
    try {
      while (this.buffered.length > 0) {
        const free = await runtime.whenReady();
        if (free <= 0) {
          this.releaseBuffered();
          return;
        }
        for (let handed = 0; handed < free && this.buffered.length > 0; ) {
          const delivery = this.buffered.shift()!;
          // Its channel is gone: the broker requeued it and will deliver it again.
          if (!delivery.channel.alive) continue;
          handed++;
          void runtime.dispatch(delivery);
        }
      }
    } catch (error) {
      this.report(error, 'dispatching deliveries failed');
    } finally {
      this.pumping = false;
    }
  }

  private releaseBuffered(): void {
    for (const delivery of this.buffered.splice(0)) {
      if (!delivery.channel.alive) continue;
      delivery.release().catch((error) => this.report(error, 'releasing a prefetched delivery failed'));
    }
  }

  // ------------------------------------------------------------------------------------
  // Copies: retry and dead letter (CopyPublisher)
  // ------------------------------------------------------------------------------------

  async publishRetryCopy(msg: ConsumeMessage, attempts: number, delayMs: number): Promise<void> {
    const { options } = this;
    const publisher = await this.confirmedPublisher();
    const bucket = retryDelayBucket(delayMs, options.retryDelaysMs);
    let target = options.queue;
    if (bucket > 0) {
      target = delayQueueName(options.queue, bucket);
      // Declared on every retry: it creates on-demand queues and renews their x-expires,
      // so a delay queue cannot expire while a copy is on its way into it.
      if (options.assertQueue) {
        await publisher.channel.assertQueue(target, delayQueueOptions(options, bucket)).catch((error) => {
          throw new RabbitMqOperationError(
            'retry',
            `could not declare delay queue '${target}' (${error instanceof Error ? error.message : String(error)})`,
            amqpReplyCode(error),
            { cause: error },
          );
        });
      }
    }
    const headers = copyHeaders(msg, { [ATTEMPTS_HEADER]: attempts, [SOURCE_QUEUE_HEADER]: options.queue });
    await publisher.send(
      '',
      target,
      msg.content,
      copyProperties(msg, headers),
      'retry',
      options.confirmTimeoutMs,
    );
  }

  async publishDeadLetter(
    msg: ConsumeMessage,
    attempts: number,
    reason: DeadLetterReason,
    detail: string,
  ): Promise<void> {
    const { options } = this;
    const publisher = await this.confirmedPublisher();
    const headers = copyHeaders(msg, {
      [REASON_HEADER]: reason,
      [DETAIL_HEADER]: detail.length > MAX_DETAIL_CHARS ? `${detail.slice(0, MAX_DETAIL_CHARS)}…` : detail,
      [ATTEMPTS_HEADER]: attempts,
      [SOURCE_QUEUE_HEADER]: options.queue,
      [CONSUMER_HEADER]: this.adapterOptions.consumerName,
      [DEAD_LETTERED_AT_HEADER]: Date.now(),
    });
    await publisher.send(
      options.deadLetterExchange,
      options.deadLetterRoutingKey,
      msg.content,
      copyProperties(msg, headers),
      'dead-letter',
      options.confirmTimeoutMs,
    );
  }

  requeueLater(channel: DeliveryChannel, msg: ConsumeMessage, delayMs: number): void {
    const timer = setTimeout(() => {
      this.requeueTimers.delete(timer);
      if (!channel.alive) return;
      try {
        channel.settle('nack', msg);
      } catch (error) {
        this.report(error, 'requeueing a message whose copy failed');
      }
    }, delayMs);
    timer.unref?.();
    this.requeueTimers.add(timer);
  }

  /** The confirm channel for copies, on the current connection (created on first use, re-created after it closes). */
  private async confirmedPublisher(): Promise<ConfirmedPublisher> {
    if (this.publisher?.open) return this.publisher;
    this.publisherOpening ??= (async () => {
      const connection = this.connection;
      if (!connection) throw new RabbitMqOperationError('publish', 'not connected to RabbitMQ');
      const channel = await connection.createConfirmChannel();
      channel.on('error', (error: Error) => this.report(error, 'publisher channel error'));
      const publisher = ConfirmedPublisher.for(channel);
      this.publisher = publisher;
      return publisher;
    })().finally(() => {
      this.publisherOpening = undefined;
    });
    return this.publisherOpening;
  }

  // ------------------------------------------------------------------------------------

  private checkConsumerTimeout(runtime: AdapterRuntime): void {
    const findings = consumerTimeoutFindings({
      consumerTimeoutMs: this.options.consumerTimeoutMs,
      handlerTimeoutMs: this.adapterOptions.handlerTimeoutMs,
      outageHoldMs: this.adapterOptions.outageHoldMs,
      prefetch: this.prefetch,
      concurrency: runtime.concurrency,
      queueType: this.options.queueType,
      serverVersion: this.serverVersionText,
    });
    for (const finding of findings) {
      if (finding.level === 'error') throw new BrokerMisconfiguredError(finding.message);
      if (finding.level === 'warn')
        this.log.warn(`rabbitmq: ${finding.message}`, { queue: this.options.queue });
    }
  }

  /** Quorum-queue limits that make the broker act before the consumer does. */
  private checkQuorumLimits(): void {
    const { queueType, deliveryLimit, queue } = this.options;
    if (queueType !== 'quorum') return;
    const { maxAttempts } = this.adapterOptions;
    if (deliveryLimit !== undefined && maxAttempts !== undefined && deliveryLimit <= maxAttempts) {
      // Before RabbitMQ 4.3 every requeue (releases at stop and during store outages
      // included) raises x-delivery-count, so the broker would dead-letter, without a
      // reason, messages the consumer still means to retry.
      throw new BrokerMisconfiguredError(
        `deliveryLimit ${deliveryLimit} of quorum queue '${queue}' is not above maxAttempts ${maxAttempts}: the broker would dead-letter (without a reason) before the consumer does; raise broker.deliveryLimit well above maxAttempts`,
      );
    }
    if (this.prefetch > QUORUM_PREFETCH_CAP) {
      this.log.warn(
        `rabbitmq: prefetch ${this.prefetch} is above the ${QUORUM_PREFETCH_CAP} a quorum queue delivers unacked to one consumer: the surplus is never used`,
        { queue },
      );
    }
  }

  private serialize(step: () => Promise<void>): Promise<void> {
    const next = this.control.then(step);
    this.control = next.catch(() => {});
    return next;
  }

  private report(error: unknown, context: string): void {
    if (this.runtime) this.runtime.reportError(error, context);
    else this.log.warn(`broker: ${context}`, { error });
  }
}

/** Properties of a copy: the original's, except `userId` (the broker checks it against the publishing user) and `expiration` (it would race the delay queue's TTL). */
export function copyProperties(msg: Message, headers: Record<string, unknown>): Options.Publish {
  const p = msg.properties;
  const properties: Options.Publish = { persistent: true, headers };
  if (p.contentType !== undefined) properties.contentType = p.contentType;
  if (p.contentEncoding !== undefined) properties.contentEncoding = p.contentEncoding;
  if (p.priority !== undefined) properties.priority = p.priority;
  if (p.correlationId !== undefined) properties.correlationId = p.correlationId;
  if (p.replyTo !== undefined) properties.replyTo = p.replyTo;
  if (p.messageId !== undefined) properties.messageId = p.messageId;
  if (p.timestamp !== undefined) properties.timestamp = p.timestamp;
  if (p.type !== undefined) properties.type = p.type;
  if (p.appId !== undefined) properties.appId = p.appId;
  return properties;
}

/** Runs `work` on a confirm channel of its own and closes it (a failed passive check closes it for us). */
async function withThrowawayChannel<T>(
  connection: ChannelModel,
  work: (channel: ConfirmChannel) => Promise<T>,
): Promise<T> {
  const channel = await connection.createConfirmChannel();
  // A refused declare arrives as a channel 'error' event as well as the rejection.
  channel.on('error', () => {});
  try {
    return await work(channel);
  } finally {
    await closeQuietly(channel);
  }
}

function misconfigured(error: unknown, options: ResolvedOptions): unknown {
  const code = amqpReplyCode(error);
  if (code === AMQP_PRECONDITION_FAILED) {
    return new BrokerMisconfiguredError(
      `queue '${options.queue}' or its dead-letter/delay queues exist with other arguments than broker.queueType ('${options.queueType}'), deadLetterExchange, deliveryLimit and queueArguments ask for; align the options with the existing queues or set broker.assertQueue: false`,
      { cause: error },
    );
  }
  if (code === AMQP_ACCESS_REFUSED) {
    return new BrokerMisconfiguredError(
      `the RabbitMQ user may not declare queue '${options.queue}' and its topology; declare it with assertTopology() as an admin and set broker.assertQueue: false`,
      { cause: error },
    );
  }
  return error;
}

function connectionUrl(url: string, heartbeatSeconds: number | undefined): string {
  if (heartbeatSeconds === undefined) return url;
  const parsed = new URL(url);
  parsed.searchParams.set('heartbeat', String(heartbeatSeconds));
  return parsed.toString();
}

function serverVersionOf(connection: ChannelModel): string | undefined {
  const version = (connection.connection as { serverProperties?: { version?: unknown } }).serverProperties
    ?.version;
  if (typeof version === 'string') return version;
  if (Buffer.isBuffer(version)) return version.toString('utf8');
  return undefined;
}
