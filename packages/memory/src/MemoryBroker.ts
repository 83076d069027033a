import { randomBytes } from 'node:crypto';
import { ConfigError } from '@oncely/core';
import { BrokerClosedError, InjectedFaultError, StaleReceiptError } from './errors.js';
import type { IdleWaiter, StoredMessage, Waiter } from './QueueState.js';
import { faultId, QueueState } from './QueueState.js';
import type {
  BrokerFaults,
  DeadLetter,
  FaultTarget,
  MemoryDelivery,
  NackOptions,
  QueueOptions,
  QueueStats,
  ReceiveOptions,
  SendInput,
  SendResult,
} from './types.js';
import {
  checkQueueName,
  checkReceiveOptions,
  checkSendInput,
  cloneBody,
  integerIn,
  MESSAGE_ID_ATTRIBUTE,
  resolveQueueOptions,
} from './validation.js';

export { MESSAGE_ID_ATTRIBUTE } from './validation.js';

/**
 * An in-process message broker with real at-least-once semantics, for tests, demos and
 * the embedded default: leased deliveries with receipts, redelivery when a lease expires,
 * delivery counts, delayed retries, a dead-letter list after `maxDeliveries` (like an
 * SQS redrive policy), FIFO groups, long polling, and fault injection.
 *
 * Each instance is independent (no global state), except the brokers you ask for by
 * name with {@link MemoryBroker.named}, which is what a config from the environment
 * (`ONCELY_BROKER_TYPE=memory`) uses. Messages live in memory only: they are gone when
 * the process exits.
 *
 * @example
 * ```ts
 * const broker = new MemoryBroker();
 * broker.createQueue('orders', { visibilityTimeoutMs: 5000, maxDeliveries: 5 });
 * await broker.send('orders', { id: 'order-1', body: { orderId: 1 } });
 * const [delivery] = await broker.receive('orders', { max: 1, waitMs: 1000 });
 * await broker.ack(delivery.receipt);
 * broker.close();
 * ```
 */
export class MemoryBroker {
  private static readonly byName = new Map<string, MemoryBroker>();

  /**
   * The process-wide broker registered under `name`, created on first use (and again
   * after it was closed). A memory `broker` section without an instance
   * (`{ type: 'memory', queue }`, as `loadConfig()` builds from `ONCELY_BROKER_TYPE=memory`)
   * consumes from `MemoryBroker.named(broker.broker ?? 'default')`, so the producer in
   * the same process sends there.
   *
   * @example
   * ```ts
   * // ONCELY_NAME=payments ONCELY_BROKER_TYPE=memory ONCELY_BROKER_QUEUE=payments
   * const consumer = await createConsumer({ ...loadConfig(), store, handler });
   * await consumer.start();
   * await MemoryBroker.named().send('payments', { id: 'order-1', body: { orderId: 1 } });
   * ```
   */
  static named(name = 'default'): MemoryBroker {
    checkQueueName(name, 'name');
    let broker = MemoryBroker.byName.get(name);
    if (broker === undefined || broker.closed) {
      broker = new MemoryBroker();
      broker.registeredAs = name;
      MemoryBroker.byName.set(name, broker);
    }
    return broker;
  }

  private registeredAs: string | undefined;

  /**
   * Fault hooks consulted per message (see {@link BrokerFaults}); replace at any time.
   * `randomFaults({ seed, ... })` builds reproducible ones.
   */
  faults: BrokerFaults = {};

  private readonly queues = new Map<string, QueueState>();
  private readonly receipts = new Map<string, { queue: QueueState; message: StoredMessage }>();
  private sequence = 0;
  private receiptCounter = 0;
  private readonly instanceTag = randomBytes(3).toString('hex');
  private closed = false;

  /**
   * Creates a queue, or updates the options of an existing one (queues are also created
   * with defaults on first use).
   *
   * @example
   * ```ts
   * broker.createQueue('payments', { visibilityTimeoutMs: 1000, maxDeliveries: 3, deadLetterQueue: 'payments-dlq', fifo: true });
   * ```
   */
  createQueue(name: string, options: QueueOptions = {}): void {
    this.assertOpen();
    checkQueueName(name, 'queue');
    const settings = resolveQueueOptions(name, options);
    const existing = this.queues.get(name);
    if (!existing) {
      this.queues.set(name, new QueueState(name, settings));
      return;
    }
    if (existing.settings.fifo !== settings.fifo && existing.all.size > 0) {
      throw new ConfigError('fifo', `cannot change on queue '${name}' while it holds messages`);
    }
    existing.settings = settings;
  }

  /** True when the queue exists (was created or used). */
  hasQueue(name: string): boolean {
    return this.queues.has(name);
  }

  /** The options a queue runs with, defaults filled in. */
  queueOptions(
    name: string,
  ): Readonly<Required<Pick<QueueOptions, 'visibilityTimeoutMs' | 'fifo'>>> & QueueOptions {
    return { ...this.queue(name).settings };
  }

  /**
   * Sends a message. `id` is the producer's message ID: it is also stored in attribute
   * `message-id`. The broker assigns its own ID to every stored copy. The active
   * OpenTelemetry context goes along as a `traceparent` attribute, unless you set one.
   *
   * @example
   * ```ts
   * await broker.send('orders', { id: 'order-42', body: { amount: 40 }, groupId: 'customer-7', delayMs: 100 });
   * ```
   */
  async send(queueName: string, input: SendInput): Promise<SendResult> {
    this.assertOpen();
    const queue = this.queue(queueName);
    const attributes = checkSendInput(input);
    const producerId = input.id ?? attributes[MESSAGE_ID_ATTRIBUTE];
    const body = cloneBody(input.body);
    const now = Date.now();
    const stored = this.store(queue, {
      producerId,
      body,
      attributes,
      groupId: input.groupId,
      delayMs: input.delayMs ?? 0,
      now,
    });
    const target: FaultTarget = {
      queue: queue.name,
      messageId: stored.id,
      producerMessageId: producerId,
      deliveryCount: 0,
    };
    if (this.faults.duplicateSend?.(producerId ?? stored.id, target)) {
      const second = this.store(queue, {
        producerId,
        body,
        attributes,
        groupId: input.groupId,
        delayMs: input.delayMs ?? 0,
        now,
      });
      second.copy = true;
    }
    this.pump(queue);
    return { messageId: stored.id, sequence: stored.sequence };
  }

  /**
   * Leases up to `max` messages. With `waitMs`, waits until a message is sent, becomes
   * visible or returns from an expired lease (a long poll), or until `signal` aborts;
   * resolves with an empty list when the wait ends without messages.
   *
   * @example
   * ```ts
   * const deliveries = await broker.receive('orders', { max: 10, visibilityTimeoutMs: 2000, waitMs: 20_000, signal });
   * ```
   */
  receive(queueName: string, options: ReceiveOptions = {}): Promise<MemoryDelivery[]> {
    try {
      this.assertOpen();
      const queue = this.queue(queueName);
      const { max, visibilityTimeoutMs, waitMs } = checkReceiveOptions(options, queue.settings);
      this.advance(queue);
      const now = this.take(queue, max, visibilityTimeoutMs);
      if (now.length > 0 || waitMs === 0 || options.signal?.aborted) {
        this.arm(queue);
        return Promise.resolve(now);
      }
      return new Promise<MemoryDelivery[]>((resolve) => {
        const signal = options.signal;
        let timer: NodeJS.Timeout | undefined;
        const waiter: Waiter = {
          max,
          visibilityTimeoutMs,
          resolve,
          cleanup: () => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
          },
        };
        const finish = () => {
          const index = queue.waiters.indexOf(waiter);
          if (index < 0) return;
          queue.waiters.splice(index, 1);
          waiter.cleanup();
          resolve([]);
        };
        const onAbort = () => finish();
        if (Number.isFinite(waitMs)) timer = setTimeout(finish, waitMs);
        signal?.addEventListener('abort', onAbort, { once: true });
        queue.waiters.push(waiter);
        this.arm(queue);
      });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Pushes a delivery's lease to `ms` from now (0 makes it visible again at once, still
   * counted as a delivery). Returns the new expiry. Rejects with
   * {@link StaleReceiptError} when the lease already expired or the message was
   * redelivered or settled.
   *
   * @example
   * ```ts
   * await broker.extend(delivery.receipt, 30_000);
   * ```
   */
  async extend(receipt: string, ms: number): Promise<number> {
    this.assertOpen();
    integerIn(ms, 0, Number.MAX_SAFE_INTEGER, 'extend.ms');
    const { queue, message } = this.leased(receipt);
    if (this.faults.failExtend?.(faultId(message), queue.target(message)))
      throw new InjectedFaultError('failExtend');
    const now = Date.now();
    if (ms === 0) {
      this.leaseEnded(queue, message);
      this.pump(queue);
      return now;
    }
    message.until = now + ms;
    message.version++;
    queue.timeline.push({ at: message.until, message, version: message.version });
    this.arm(queue);
    return message.until;
  }

  /**
   * Deletes a delivered message. Rejects with {@link StaleReceiptError} (and the message
   * stays) when the receipt is no longer valid. With the `dropAck` fault the call
   * succeeds but is lost, like an ack that never reached a real broker.
   *
   * @example
   * ```ts
   * await broker.ack(delivery.receipt);
   * ```
   */
  async ack(receipt: string): Promise<void> {
    this.assertOpen();
    const { queue, message } = this.leased(receipt);
    if (this.faults.dropAck?.(faultId(message), queue.target(message))) return;
    this.remove(queue, message);
  }

  /**
   * Gives a delivery back: visible again after `delayMs`; with `countAsDelivery: false`
   * the delivery does not count towards `maxDeliveries`.
   *
   * @example
   * ```ts
   * await broker.nack(delivery.receipt, { delayMs: 1000 });
   * ```
   */
  async nack(receipt: string, options: NackOptions = {}): Promise<void> {
    this.assertOpen();
    const delayMs = options.delayMs ?? 0;
    integerIn(delayMs, 0, Number.MAX_SAFE_INTEGER, 'nack.delayMs');
    const { queue, message } = this.leased(receipt);
    this.dropReceipt(message);
    if (options.countAsDelivery === false) {
      message.deliveryCount = Math.max(0, message.deliveryCount - 1);
    } else if (queue.deliveriesExhausted(message)) {
      this.moveToDeadLetter(queue, message, 'max-deliveries', queue.maxDeliveriesDetail(message));
      return;
    }
    if (delayMs > 0) queue.setState(message, 'delayed', Date.now() + delayMs);
    else queue.setState(message, 'ready');
    this.pump(queue);
  }

  /**
   * Makes a delivery visible again at once without counting it (stop, store outage).
   *
   * @example
   * ```ts
   * await broker.release(delivery.receipt);
   * ```
   */
  release(receipt: string): Promise<void> {
    return this.nack(receipt, { delayMs: 0, countAsDelivery: false });
  }

  /**
   * Moves a delivered message to its queue's dead-letter list (and to the queue's
   * `deadLetterQueue`, when set) with the reason.
   *
   * @example
   * ```ts
   * await broker.deadLetter(delivery.receipt, 'invalid-body', 'Unexpected token < in JSON');
   * ```
   */
  async deadLetter(receipt: string, reason: string, detail?: string): Promise<void> {
    this.assertOpen();
    if (typeof reason !== 'string' || reason === '')
      throw new ConfigError('deadLetter.reason', 'must be a non-empty string');
    const { queue, message } = this.leased(receipt);
    this.moveToDeadLetter(queue, message, reason, detail);
  }

  /**
   * Ends the lease of every in-flight message whose producer ID or broker ID is `id`,
   * as if it had expired: the message is handed out again (a lost ack's consequence,
   * without waiting). Returns how many copies were affected.
   *
   * @example
   * ```ts
   * broker.forceRedelivery('orders', 'order-42');
   * ```
   */
  forceRedelivery(queueName: string, id: string): number {
    this.assertOpen();
    const queue = this.queue(queueName);
    this.advance(queue);
    let count = 0;
    for (const message of [...queue.all]) {
      if (message.state !== 'inflight' || (message.producerId !== id && message.id !== id)) continue;
      this.leaseEnded(queue, message);
      count++;
    }
    this.pump(queue);
    return count;
  }

  /**
   * Counts of a queue.
   *
   * @example
   * ```ts
   * const { visible, inFlight, delayed, deadLettered } = broker.stats('orders');
   * ```
   */
  stats(queueName: string): QueueStats {
    const queue = this.queue(queueName);
    if (!this.closed) this.advance(queue);
    return {
      visible: queue.counts.ready,
      inFlight: queue.counts.inflight,
      delayed: queue.counts.delayed,
      deadLettered: queue.deadLetters.length,
    };
  }

  /**
   * Messages that left `queue` for its dead-letter list, oldest first, with reasons.
   *
   * @example
   * ```ts
   * broker.deadLetters('orders').map((d) => [d.producerMessageId, d.reason]);
   * ```
   */
  deadLetters(queueName: string): DeadLetter[] {
    const queue = this.queue(queueName);
    if (!this.closed) this.advance(queue);
    return queue.deadLetters.map((entry) => ({
      ...entry,
      body: cloneBody(entry.body),
      attributes: { ...entry.attributes },
    }));
  }

  /**
   * When the oldest entry on `queue`'s dead-letter list was dead-lettered (epoch ms), or
   * undefined when the list is empty. Cheap (no copies), for gauges.
   *
   * @example
   * ```ts
   * const at = broker.oldestDeadLetterAt('orders');
   * if (at !== undefined) console.log('oldest dead letter', Date.now() - at, 'ms old');
   * ```
   */
  oldestDeadLetterAt(queueName: string): number | undefined {
    let oldest: number | undefined;
    // Appended in time order; the minimum still holds after the wall clock stepped back.
    for (const entry of this.queue(queueName).deadLetters)
      if (oldest === undefined || entry.at < oldest) oldest = entry.at;
    return oldest;
  }

  /**
   * Takes one entry off `queue`'s dead-letter list (by the broker ID it had), as an operator
   * does after replaying or discarding it. Returns false when the list has no such entry.
   *
   * @example
   * ```ts
   * broker.removeDeadLetter('orders', broker.deadLetters('orders')[0].messageId); // true
   * ```
   */
  removeDeadLetter(queueName: string, messageId: string): boolean {
    const list = this.queue(queueName).deadLetters;
    const index = list.findIndex((entry) => entry.messageId === messageId);
    if (index < 0) return false;
    list.splice(index, 1);
    return true;
  }

  /**
   * Resolves true once the queue holds nothing visible, in flight or delayed, or false
   * when `timeoutMs` passes first.
   *
   * @example
   * ```ts
   * if (!(await broker.waitForIdle('orders', { timeoutMs: 10_000 }))) throw new Error('backlog left');
   * ```
   */
  waitForIdle(
    queueName: string,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<boolean> {
    const queue = this.queue(queueName);
    if (this.closed) return Promise.resolve(queue.all.size === 0);
    this.advance(queue);
    if (queue.all.size === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter: IdleWaiter = {
        resolve,
        cleanup: () => {
          clearTimeout(timer);
          options.signal?.removeEventListener('abort', onGiveUp);
        },
      };
      const onGiveUp = () => {
        const index = queue.idleWaiters.indexOf(waiter);
        if (index < 0) return;
        queue.idleWaiters.splice(index, 1);
        waiter.cleanup();
        resolve(false);
      };
      if (options.timeoutMs !== undefined) timer = setTimeout(onGiveUp, options.timeoutMs);
      options.signal?.addEventListener('abort', onGiveUp, { once: true });
      queue.idleWaiters.push(waiter);
      this.arm(queue);
    });
  }

  /**
   * Closes the broker: clears its timers, ends pending long polls (empty) and idle
   * waits (false), and refuses further sends, receives and settlements. Inspection
   * (`stats`, `deadLetters`) keeps working.
   *
   * @example
   * ```ts
   * broker.close();
   * ```
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.registeredAs !== undefined && MemoryBroker.byName.get(this.registeredAs) === this)
      MemoryBroker.byName.delete(this.registeredAs);
    for (const queue of this.queues.values()) {
      clearTimeout(queue.timer);
      queue.timer = undefined;
      for (const waiter of queue.waiters.splice(0)) {
        waiter.cleanup();
        waiter.resolve([]);
      }
      for (const waiter of queue.idleWaiters.splice(0)) {
        waiter.cleanup();
        waiter.resolve(queue.all.size === 0);
      }
    }
  }

  /** True once `close()` was called. */
  get isClosed(): boolean {
    return this.closed;
  }

  // ------------------------------------------------------------------------------------
  // Internals
  // ------------------------------------------------------------------------------------

  private assertOpen(): void {
    if (this.closed) throw new BrokerClosedError();
  }

  private queue(name: string): QueueState {
    let queue = this.queues.get(name);
    if (!queue) {
      checkQueueName(name, 'queue');
      queue = new QueueState(name, resolveQueueOptions(name, {}));
      this.queues.set(name, queue);
    }
    return queue;
  }

  private store(
    queue: QueueState,
    input: {
      producerId: string | undefined;
      body: unknown;
      attributes: Record<string, string>;
      groupId: string | undefined;
      delayMs: number;
      now: number;
      id?: string;
      deliveryCount?: number;
    },
  ): StoredMessage {
    const sequence = ++this.sequence;
    const message: StoredMessage = {
      id: input.id ?? `m-${this.instanceTag}-${sequence}`,
      producerId: input.producerId,
      body: input.body,
      attributes: { ...input.attributes },
      groupId: input.groupId,
      sequence,
      sentAt: input.now,
      deliveryCount: input.deliveryCount ?? 0,
      state: 'ready',
      until: 0,
      version: 0,
      receipt: undefined,
      copy: false,
      removed: false,
    };
    if (input.producerId !== undefined) message.attributes[MESSAGE_ID_ATTRIBUTE] = input.producerId;
    queue.add(message, input.delayMs, input.now);
    return message;
  }

  /** Applies every lease expiry and delay end that is due. */
  private advance(queue: QueueState, now = Date.now()): void {
    for (let top = queue.timeline.peek(); top && top.at <= now; top = queue.timeline.peek()) {
      queue.timeline.pop();
      const { message } = top;
      if (message.removed || top.version !== message.version) continue;
      if (message.state === 'delayed') queue.setState(message, 'ready');
      else if (message.state === 'inflight') this.leaseEnded(queue, message);
    }
  }

  /** An in-flight message's lease is over: redeliver it, or dead-letter it when its deliveries are used up. */
  private leaseEnded(queue: QueueState, message: StoredMessage): void {
    this.dropReceipt(message);
    if (queue.deliveriesExhausted(message)) {
      this.moveToDeadLetter(queue, message, 'max-deliveries', queue.maxDeliveriesDetail(message));
    } else {
      queue.setState(message, 'ready');
    }
  }

  private take(queue: QueueState, max: number, visibilityTimeoutMs: number): MemoryDelivery[] {
    const deliveries: MemoryDelivery[] = [];
    const now = Date.now();
    for (const message of queue.eligible) {
      if (deliveries.length >= max) break;
      message.deliveryCount++;
      const receipt = `r-${this.instanceTag}-${++this.receiptCounter}-${randomBytes(4).toString('hex')}`;
      message.receipt = receipt;
      this.receipts.set(receipt, { queue, message });
      queue.setState(message, 'inflight', now + visibilityTimeoutMs);
      deliveries.push(queue.toDelivery(message));
      if (!message.copy && this.faults.duplicateDelivery?.(faultId(message), queue.target(message))) {
        // The same message (same broker ID) handed out a second time: what at-least-once allows.
        const copy = this.store(queue, {
          id: message.id,
          producerId: message.producerId,
          body: message.body,
          attributes: message.attributes,
          groupId: message.groupId,
          delayMs: 0,
          now,
          deliveryCount: message.deliveryCount - 1,
        });
        copy.copy = true;
        copy.sentAt = message.sentAt;
      }
    }
    return deliveries;
  }

  /** Resolves the receipt of a live lease, or throws StaleReceiptError. */
  private leased(receipt: string): { queue: QueueState; message: StoredMessage } {
    const entry = this.receipts.get(receipt);
    if (!entry)
      throw new StaleReceiptError(
        String(receipt),
        'unknown receipt, or the message was already settled or redelivered',
      );
    this.advance(entry.queue);
    const { message } = entry;
    if (message.removed || message.receipt !== receipt || message.state !== 'inflight') {
      throw new StaleReceiptError(
        receipt,
        'the lease expired or the message was redelivered with a new receipt',
      );
    }
    return entry;
  }

  private dropReceipt(message: StoredMessage): void {
    if (message.receipt !== undefined) this.receipts.delete(message.receipt);
    message.receipt = undefined;
  }

  /** Takes a message out of the queue for good (ack, dead letter). */
  private remove(queue: QueueState, message: StoredMessage): void {
    this.dropReceipt(message);
    queue.detach(message);
    this.pump(queue);
    queue.resolveIdleWaiters();
  }

  private moveToDeadLetter(queue: QueueState, message: StoredMessage, reason: string, detail?: string): void {
    const now = Date.now();
    queue.recordDeadLetter(message, reason, detail, now);
    const target = queue.settings.deadLetterQueue;
    if (target !== undefined) {
      const dlq = this.queue(target);
      const attributes: Record<string, string> = {
        ...message.attributes,
        'dead-letter-reason': reason,
        'dead-letter-source': queue.name,
      };
      if (detail !== undefined) attributes['dead-letter-detail'] = detail;
      // Straight into the target queue: producer-side faults do not apply to a broker move.
      this.store(dlq, {
        producerId: message.producerId,
        body: message.body,
        attributes,
        groupId: message.groupId,
        delayMs: 0,
        now,
      });
      this.pump(dlq);
    }
    this.remove(queue, message);
  }

  /** Hands available messages to waiting receivers, then re-arms the timer. */
  private pump(queue: QueueState): void {
    if (this.closed) return;
    this.advance(queue);
    while (queue.waiters.length > 0 && queue.eligible.size > 0) {
      const waiter = queue.waiters.shift()!;
      waiter.cleanup();
      waiter.resolve(this.take(queue, waiter.max, waiter.visibilityTimeoutMs));
    }
    this.arm(queue);
  }

  /** Re-arms the queue's timer (see QueueState.arm) while the broker is open. */
  private arm(queue: QueueState): void {
    if (this.closed) return;
    queue.arm(() => this.pump(queue));
  }
}
