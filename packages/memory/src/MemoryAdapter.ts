import {
  type AdapterLease,
  type AdapterRuntime,
  type BrokerAdapter,
  type BrokerConfig,
  BrokerMisconfiguredError,
  ConsumerStateError,
  type DeadLetterBacklog,
  type DeadLetterReason,
  type Delivery,
  type IdStrategy,
  isOncelyError,
  type Logger,
  pauseUnlessAborted,
} from '@oncely/core';
import { type ResolvedMemoryConfig, resolveMemoryConfig } from './config.js';
import { MESSAGE_ID_ATTRIBUTE } from './MemoryBroker.js';
import type { MemoryDelivery } from './types.js';

/** Pause after a failed receive, growing to this cap, so a broken broker is not polled hot. */
const RECEIVE_RETRY_MAX_MS = 2000;

/**
 * The Oncely adapter for {@link MemoryBroker}: a pull loop that fetches at most as many
 * messages as the consumer has free handler slots, long-polls until a message arrives
 * or the consumer stops, and maps each settlement to the broker's ack / nack / release /
 * dead-letter / extend. Create it with {@link createAdapter}; `createConsumer` does so for
 * `broker.type: 'memory'`.
 *
 * @example
 * ```ts
 * const adapter = new MemoryAdapter(resolveMemoryConfig({ type: 'memory', broker, queue: 'orders' }), silentLogger);
 * const consumer = new Consumer({ name: 'orders', broker: { type: 'memory', broker, queue: 'orders' }, store, handler }, adapter);
 * ```
 */
export class MemoryAdapter implements BrokerAdapter {
  readonly type = 'memory';
  readonly lease: AdapterLease;
  readonly defaultIdStrategy: IdStrategy = { attribute: MESSAGE_ID_ATTRIBUTE };
  private loop: Promise<void> | undefined;
  private readonly stopped = new AbortController();
  /** Aborts the long poll in progress (pause or stop); set only while a poll is on. */
  private poll: AbortController | undefined;
  /**
   * The last poll's controller, kept for the next poll while nobody aborted it: at full
   * concurrency the loop polls for every freed slot, and a new AbortController (and its
   * signal) per poll was a visible share of the adapter's CPU per message.
   */
  private unusedPoll: AbortController | undefined;

  constructor(
    private readonly config: ResolvedMemoryConfig,
    private readonly log: Logger,
  ) {
    this.lease = { extendByMs: config.visibilityTimeoutMs };
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    if (this.loop) throw new ConsumerStateError('the memory adapter was already started');
    if (this.config.broker.isClosed)
      throw new BrokerMisconfiguredError('the memory broker is closed: nothing can be received');
    const onStopping = () => this.abortAll();
    if (runtime.stopping.aborted) onStopping();
    else runtime.stopping.addEventListener('abort', onStopping, { once: true });
    this.loop = this.receiveLoop(runtime).catch((error) => {
      // receiveLoop catches what it expects; anything else must not become an unhandled rejection.
      this.log.error('memory adapter receive loop crashed', { error, queue: this.config.queue });
    });
  }

  /** Store outage: end the long poll now, so nothing new is received; whenReady() blocks the next one. */
  async pause(): Promise<void> {
    this.poll?.abort();
  }

  async resume(): Promise<void> {
    // Nothing to do: the loop is waiting in runtime.whenReady(), which returns once the store is back.
  }

  async stop(): Promise<void> {
    this.abortAll();
    await this.loop;
  }

  async close(): Promise<void> {
    // The MemoryBroker belongs to the application, which may share it: never close it here.
  }

  /**
   * The queue's dead-letter list (what `DeadLetters` works on): exact depth, and the age of
   * its oldest entry since it was dead-lettered. Copies a queue's `deadLetterQueue` holds
   * are that queue's messages, counted by its own consumer's list, not here. The gauges'
   * queue is this consumer's queue, whose list it is.
   */
  async deadLetterBacklog(): Promise<DeadLetterBacklog> {
    const { broker, queue } = this.config;
    const depth = broker.stats(queue).deadLettered;
    const oldest = broker.oldestDeadLetterAt(queue);
    return { depth, oldestAgeMs: oldest === undefined ? 0 : Date.now() - oldest, queue };
  }

  private abortAll(): void {
    this.stopped.abort();
    this.poll?.abort();
  }

  private async receiveLoop(runtime: AdapterRuntime): Promise<void> {
    const { broker, queue, visibilityTimeoutMs, maxBatch, pollWaitMs } = this.config;
    let failures = 0;
    while (!this.stopped.signal.aborted) {
      const free = await runtime.whenReady();
      if (free <= 0 || this.stopped.signal.aborted) return;
      const poll = this.unusedPoll?.signal.aborted === false ? this.unusedPoll : new AbortController();
      this.poll = poll;
      let deliveries: MemoryDelivery[];
      try {
        deliveries = await broker.receive(queue, {
          max: Math.min(free, maxBatch),
          visibilityTimeoutMs,
          waitMs: pollWaitMs,
          signal: poll.signal,
        });
        failures = 0;
      } catch (error) {
        if (isOncelyError(error, 'SHUTDOWN')) {
          runtime.reportError(
            error,
            `memory broker closed while consuming '${queue}': the receive loop ends`,
          );
          return;
        }
        runtime.reportError(error, `receive from memory queue '${queue}' failed`);
        failures++;
        await pauseUnlessAborted(Math.min(RECEIVE_RETRY_MAX_MS, 50 * 2 ** failures), this.stopped.signal);
        continue;
      } finally {
        if (this.poll === poll) this.poll = undefined;
        this.unusedPoll = poll;
      }
      // Not awaited: dispatch resolves only once the delivery is settled, and the core
      // bounds concurrency through whenReady().
      for (const delivery of deliveries) void runtime.dispatch(this.toDelivery(delivery));
    }
  }

  private toDelivery(delivery: MemoryDelivery): Delivery {
    const { broker } = this.config;
    const { receipt } = delivery;
    return {
      envelope: {
        body: delivery.body,
        attributes: delivery.attributes,
        brokerMessageId: delivery.messageId,
        producerMessageId: delivery.producerMessageId,
        deliveryCount: delivery.deliveryCount,
        redelivered: delivery.deliveryCount > 1,
        orderingKey: delivery.groupId,
        sequence: String(delivery.sequence),
        source: delivery.queue,
        raw: delivery,
      },
      leaseExpiresAt: delivery.leaseExpiresAt,
      ack: () => broker.ack(receipt),
      retryLater: (delayMs: number) =>
        broker.nack(receipt, { delayMs: Math.max(0, Math.round(delayMs)), countAsDelivery: true }),
      deadLetter: (reason: DeadLetterReason, detail: string) => broker.deadLetter(receipt, reason, detail),
      release: () => broker.release(receipt),
      extendLease: async (ms: number) => {
        await broker.extend(receipt, Math.max(1, Math.ceil(ms)));
      },
    };
  }
}

/**
 * Builds the memory adapter from a `broker` section; `createConsumer` calls it for
 * `broker.type: 'memory'`. Throws a `ConfigError` naming the field when the section is
 * wrong.
 *
 * @example
 * ```ts
 * const adapter = createAdapter({ type: 'memory', broker, queue: 'orders' }, { consumerName: 'orders', log: stderrLogger });
 * ```
 */
export function createAdapter(
  brokerConfig: BrokerConfig,
  options: { consumerName: string; log: Logger },
): BrokerAdapter {
  return new MemoryAdapter(resolveMemoryConfig(brokerConfig), options.log);
}
