import { randomBytes } from 'node:crypto';
import { ConfigError, traceHeaders } from '@oncely/core';
import { BrokerClosedError, InjectedFaultError, StaleReceiptError } from './errors.js';
import { TimeHeap } from './TimeHeap.js';
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

/** Attribute that carries the producer-set message ID (the memory adapter's default ID strategy). */
export const MESSAGE_ID_ATTRIBUTE = 'message-id';

/** @default visibility timeout of a queue created without options. */
const DEFAULT_VISIBILITY_TIMEOUT_MS = 30_000;
const MAX_RECEIVE_BATCH = 1000;

type MessageState = 'ready' | 'delayed' | 'inflight';

/** One stored copy of a message. */
interface StoredMessage {
  id: string;
  producerId: string | undefined;
  body: unknown;
  attributes: Record<string, string>;
  groupId: string | undefined;
  sequence: number;
  sentAt: number;
  deliveryCount: number;
  state: MessageState;
  /** `delayed`: when it becomes visible; `inflight`: when the lease runs out. */
  until: number;
  /** Bumped on every state or lease change, so older timeline entries are recognised as stale. */
  version: number;
  receipt: string | undefined;
  /** A fault-injected copy: never duplicated again, or a deterministic hook would loop forever. */
  copy: boolean;
  removed: boolean;
}

interface TimelineEntry {
  at: number;
  message: StoredMessage;
  version: number;
}

interface Waiter {
  max: number;
  visibilityTimeoutMs: number;
  resolve(deliveries: MemoryDelivery[]): void;
  cleanup(): void;
}

interface IdleWaiter {
  resolve(idle: boolean): void;
  cleanup(): void;
}

interface QueueSettings {
  visibilityTimeoutMs: number;
  maxDeliveries: number | undefined;
  deadLetterQueue: string | undefined;
  fifo: boolean;
}

class QueueState {
  settings: QueueSettings;
  readonly all = new Set<StoredMessage>();
  /** Messages that may be handed out now, in the order they became available (FIFO: group heads only). */
  readonly eligible = new Set<StoredMessage>();
  /** FIFO: each group's messages in send order, whatever their state. */
  readonly groups = new Map<string, StoredMessage[]>();
  readonly timeline = new TimeHeap<TimelineEntry>();
  readonly deadLetters: DeadLetter[] = [];
  readonly waiters: Waiter[] = [];
  readonly idleWaiters: IdleWaiter[] = [];
  counts = { ready: 0, delayed: 0, inflight: 0 };
  timer: NodeJS.Timeout | undefined;
  timerAt = Number.POSITIVE_INFINITY;

  constructor(
    readonly name: string,
    settings: QueueSettings,
  ) {
    this.settings = settings;
  }
}

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
      const max = options.max ?? 1;
      integerIn(max, 1, MAX_RECEIVE_BATCH, 'receive.max');
      const visibilityTimeoutMs = options.visibilityTimeoutMs ?? queue.settings.visibilityTimeoutMs;
      integerIn(visibilityTimeoutMs, 1, Number.MAX_SAFE_INTEGER, 'receive.visibilityTimeoutMs');
      const waitMs = options.waitMs ?? 0;
      if (typeof waitMs !== 'number' || Number.isNaN(waitMs) || waitMs < 0) {
        throw new ConfigError('receive.waitMs', `must be a number >= 0, got ${String(waitMs)}`);
      }
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
    if (this.faults.failExtend?.(faultId(message), this.target(queue, message)))
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
    if (this.faults.dropAck?.(faultId(message), this.target(queue, message))) return;
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
    } else if (this.deliveriesExhausted(queue, message)) {
      this.moveToDeadLetter(queue, message, 'max-deliveries', maxDeliveriesDetail(queue, message));
      return;
    }
    if (delayMs > 0) this.setState(queue, message, 'delayed', Date.now() + delayMs);
    else this.setState(queue, message, 'ready');
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
    queue.all.add(message);
    if (queue.settings.fifo && message.groupId !== undefined) {
      let group = queue.groups.get(message.groupId);
      if (!group) {
        group = [];
        queue.groups.set(message.groupId, group);
      }
      group.push(message);
    }
    // Counted as ready first so setState's bookkeeping stays symmetric.
    queue.counts.ready++;
    if (input.delayMs > 0) this.setState(queue, message, 'delayed', input.now + input.delayMs);
    else this.setState(queue, message, 'ready');
    return message;
  }

  /** The only place a message changes state: keeps counts, eligibility and the timeline in step. */
  private setState(queue: QueueState, message: StoredMessage, state: MessageState, until = 0): void {
    queue.counts[message.state]--;
    queue.counts[state]++;
    message.state = state;
    message.until = until;
    message.version++;
    queue.eligible.delete(message);
    if (state === 'ready') {
      if (this.isGroupHead(queue, message)) queue.eligible.add(message);
    } else {
      queue.timeline.push({ at: until, message, version: message.version });
    }
  }

  private isGroupHead(queue: QueueState, message: StoredMessage): boolean {
    if (!queue.settings.fifo || message.groupId === undefined) return true;
    return queue.groups.get(message.groupId)?.[0] === message;
  }

  /** Applies every lease expiry and delay end that is due. */
  private advance(queue: QueueState, now = Date.now()): void {
    for (let top = queue.timeline.peek(); top && top.at <= now; top = queue.timeline.peek()) {
      queue.timeline.pop();
      const { message } = top;
      if (message.removed || top.version !== message.version) continue;
      if (message.state === 'delayed') this.setState(queue, message, 'ready');
      else if (message.state === 'inflight') this.leaseEnded(queue, message);
    }
  }

  /** An in-flight message's lease is over: redeliver it, or dead-letter it when its deliveries are used up. */
  private leaseEnded(queue: QueueState, message: StoredMessage): void {
    this.dropReceipt(message);
    if (this.deliveriesExhausted(queue, message)) {
      this.moveToDeadLetter(queue, message, 'max-deliveries', maxDeliveriesDetail(queue, message));
    } else {
      this.setState(queue, message, 'ready');
    }
  }

  private deliveriesExhausted(queue: QueueState, message: StoredMessage): boolean {
    const max = queue.settings.maxDeliveries;
    return max !== undefined && message.deliveryCount >= max;
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
      this.setState(queue, message, 'inflight', now + visibilityTimeoutMs);
      deliveries.push(toDelivery(queue, message));
      if (!message.copy && this.faults.duplicateDelivery?.(faultId(message), this.target(queue, message))) {
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
    queue.counts[message.state]--;
    queue.eligible.delete(message);
    queue.all.delete(message);
    message.removed = true;
    message.version++;
    if (queue.settings.fifo && message.groupId !== undefined) {
      const group = queue.groups.get(message.groupId);
      if (group) {
        const index = group.indexOf(message);
        if (index >= 0) group.splice(index, 1);
        if (group.length === 0) queue.groups.delete(message.groupId);
        // The next message of the group may go now.
        const head = group[0];
        if (index === 0 && head && head.state === 'ready') queue.eligible.add(head);
      }
    }
    this.pump(queue);
    if (queue.all.size === 0) {
      for (const waiter of queue.idleWaiters.splice(0)) {
        waiter.cleanup();
        waiter.resolve(true);
      }
    }
  }

  private moveToDeadLetter(queue: QueueState, message: StoredMessage, reason: string, detail?: string): void {
    const now = Date.now();
    queue.deadLetters.push({
      queue: queue.name,
      messageId: message.id,
      producerMessageId: message.producerId,
      body: message.body,
      attributes: { ...message.attributes },
      groupId: message.groupId,
      reason,
      detail,
      deliveryCount: message.deliveryCount,
      at: now,
    });
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

  /**
   * Sets the queue's timer to the next lease expiry or delay end, but only while someone
   * waits: everyone else sees due changes lazily, since every call advances the queue first.
   */
  private arm(queue: QueueState): void {
    if (this.closed) return;
    // Drop stale entries so the timer does not fire for changes that no longer apply.
    for (let top = queue.timeline.peek(); top; top = queue.timeline.peek()) {
      if (!top.message.removed && top.version === top.message.version) break;
      queue.timeline.pop();
    }
    const next = queue.timeline.peek();
    const wanted =
      (queue.waiters.length > 0 || queue.idleWaiters.length > 0) && next ? next.at : Number.POSITIVE_INFINITY;
    if (wanted === queue.timerAt) return;
    clearTimeout(queue.timer);
    queue.timer = undefined;
    queue.timerAt = wanted;
    if (!Number.isFinite(wanted)) return;
    queue.timer = setTimeout(
      () => {
        queue.timer = undefined;
        queue.timerAt = Number.POSITIVE_INFINITY;
        this.pump(queue);
      },
      Math.max(0, wanted - Date.now()),
    );
    // The broker alone must not keep a process alive; a long poll's own timeout does.
    queue.timer.unref?.();
  }

  private target(queue: QueueState, message: StoredMessage): FaultTarget {
    return {
      queue: queue.name,
      messageId: message.id,
      producerMessageId: message.producerId,
      deliveryCount: message.deliveryCount,
    };
  }
}

function toDelivery(queue: QueueState, message: StoredMessage): MemoryDelivery {
  const delivery: MemoryDelivery = {
    queue: queue.name,
    messageId: message.id,
    receipt: message.receipt!,
    // A fresh copy per delivery: a handler that mutates the body cannot change the redelivery.
    body: cloneBody(message.body),
    attributes: { ...message.attributes },
    sequence: message.sequence,
    deliveryCount: message.deliveryCount,
    leaseExpiresAt: message.until,
    sentAt: message.sentAt,
  };
  if (message.producerId !== undefined) delivery.producerMessageId = message.producerId;
  if (message.groupId !== undefined) delivery.groupId = message.groupId;
  return delivery;
}

function faultId(message: StoredMessage): string {
  return message.producerId ?? message.id;
}

function maxDeliveriesDetail(queue: QueueState, message: StoredMessage): string {
  return `delivered ${message.deliveryCount} times without an ack (maxDeliveries ${queue.settings.maxDeliveries})`;
}

function cloneBody(body: unknown): unknown {
  try {
    return structuredClone(body);
  } catch (error) {
    throw new ConfigError(
      'send.body',
      'must be structured-cloneable (no functions or class instances with private state)',
      {
        cause: error,
      },
    );
  }
}

function checkQueueName(name: unknown, field: string): asserts name is string {
  if (typeof name !== 'string' || name.trim() === '') {
    throw new ConfigError(
      field,
      `must be a non-empty queue name, got ${JSON.stringify(name) ?? String(name)}`,
    );
  }
}

function resolveQueueOptions(name: string, options: QueueOptions): QueueSettings {
  if (typeof options !== 'object' || options === null)
    throw new ConfigError('queue options', 'must be an object');
  const visibilityTimeoutMs = options.visibilityTimeoutMs ?? DEFAULT_VISIBILITY_TIMEOUT_MS;
  integerIn(visibilityTimeoutMs, 1, Number.MAX_SAFE_INTEGER, 'visibilityTimeoutMs');
  if (options.maxDeliveries !== undefined)
    integerIn(options.maxDeliveries, 1, Number.MAX_SAFE_INTEGER, 'maxDeliveries');
  if (options.deadLetterQueue !== undefined) {
    checkQueueName(options.deadLetterQueue, 'deadLetterQueue');
    if (options.deadLetterQueue === name)
      throw new ConfigError('deadLetterQueue', `must differ from the queue itself ('${name}')`);
  }
  if (options.fifo !== undefined && typeof options.fifo !== 'boolean')
    throw new ConfigError('fifo', 'must be true or false');
  return {
    visibilityTimeoutMs,
    maxDeliveries: options.maxDeliveries,
    deadLetterQueue: options.deadLetterQueue,
    fifo: options.fifo ?? false,
  };
}

function checkSendInput(input: SendInput): Record<string, string> {
  if (typeof input !== 'object' || input === null || !('body' in input)) {
    throw new ConfigError('send', 'takes { id?, body, attributes?, groupId?, delayMs? }');
  }
  // The sender's trace context (W3C traceparent), so the consumer's span joins its trace;
  // attributes the caller gives win.
  const attributes: Record<string, string> = traceHeaders();
  for (const [key, value] of Object.entries(input.attributes ?? {})) {
    if (typeof value !== 'string') throw new ConfigError(`send.attributes.${key}`, 'must be a string');
    attributes[key] = value;
  }
  if (input.id !== undefined) {
    if (typeof input.id !== 'string' || input.id === '')
      throw new ConfigError('send.id', 'must be a non-empty string');
    const given = attributes[MESSAGE_ID_ATTRIBUTE];
    if (given !== undefined && given !== input.id) {
      throw new ConfigError(
        'send.id',
        `is '${input.id}' but attribute '${MESSAGE_ID_ATTRIBUTE}' says '${given}'`,
      );
    }
  }
  if (input.groupId !== undefined && (typeof input.groupId !== 'string' || input.groupId === '')) {
    throw new ConfigError('send.groupId', 'must be a non-empty string');
  }
  if (input.delayMs !== undefined) integerIn(input.delayMs, 0, Number.MAX_SAFE_INTEGER, 'send.delayMs');
  return attributes;
}

function integerIn(value: unknown, min: number, max: number, field: string): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
}
