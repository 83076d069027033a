import { TimeHeap } from './TimeHeap.js';
import type { DeadLetter, FaultTarget, MemoryDelivery } from './types.js';
import { cloneBody } from './validation.js';

// One queue of a MemoryBroker: its messages and the bookkeeping that keeps their states,
// FIFO groups, timeline, waiters and timer in step. Receipts, faults and moves between
// queues are the broker's.

export type MessageState = 'ready' | 'delayed' | 'inflight';

/** One stored copy of a message. */
export interface StoredMessage {
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

export interface TimelineEntry {
  at: number;
  message: StoredMessage;
  version: number;
}

export interface Waiter {
  max: number;
  visibilityTimeoutMs: number;
  resolve(deliveries: MemoryDelivery[]): void;
  cleanup(): void;
}

export interface IdleWaiter {
  resolve(idle: boolean): void;
  cleanup(): void;
}

export interface QueueSettings {
  visibilityTimeoutMs: number;
  maxDeliveries: number | undefined;
  deadLetterQueue: string | undefined;
  fifo: boolean;
}

/** One queue's messages and waiters. */
export class QueueState {
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

  /** The only place a message changes state: keeps counts, eligibility and the timeline in step. */
  setState(message: StoredMessage, state: MessageState, until = 0): void {
    this.counts[message.state]--;
    this.counts[state]++;
    message.state = state;
    message.until = until;
    message.version++;
    this.eligible.delete(message);
    if (state === 'ready') {
      if (this.isGroupHead(message)) this.eligible.add(message);
    } else {
      this.timeline.push({ at: until, message, version: message.version });
    }
  }

  isGroupHead(message: StoredMessage): boolean {
    if (!this.settings.fifo || message.groupId === undefined) return true;
    return this.groups.get(message.groupId)?.[0] === message;
  }

  deliveriesExhausted(message: StoredMessage): boolean {
    const max = this.settings.maxDeliveries;
    return max !== undefined && message.deliveryCount >= max;
  }

  /** Takes in a new stored message: ready now, or delayed until `now + delayMs`. */
  add(message: StoredMessage, delayMs: number, now: number): void {
    this.all.add(message);
    if (this.settings.fifo && message.groupId !== undefined) {
      let group = this.groups.get(message.groupId);
      if (!group) {
        group = [];
        this.groups.set(message.groupId, group);
      }
      group.push(message);
    }
    // Counted as ready first so setState's bookkeeping stays symmetric.
    this.counts.ready++;
    if (delayMs > 0) this.setState(message, 'delayed', now + delayMs);
    else this.setState(message, 'ready');
  }

  /** Takes a message out of the queue's bookkeeping for good (its receipt is the broker's). */
  detach(message: StoredMessage): void {
    this.counts[message.state]--;
    this.eligible.delete(message);
    this.all.delete(message);
    message.removed = true;
    message.version++;
    if (this.settings.fifo && message.groupId !== undefined) {
      const group = this.groups.get(message.groupId);
      if (group) {
        const index = group.indexOf(message);
        if (index >= 0) group.splice(index, 1);
        if (group.length === 0) this.groups.delete(message.groupId);
        // The next message of the group may go now.
        const head = group[0];
        if (index === 0 && head && head.state === 'ready') this.eligible.add(head);
      }
    }
  }

  /** Answers every idle wait once the queue holds nothing. */
  resolveIdleWaiters(): void {
    if (this.all.size === 0) {
      for (const waiter of this.idleWaiters.splice(0)) {
        waiter.cleanup();
        waiter.resolve(true);
      }
    }
  }

  /** Keeps the message on the queue's dead-letter list (what `deadLetters()` shows). */
  recordDeadLetter(message: StoredMessage, reason: string, detail: string | undefined, now: number): void {
    this.deadLetters.push({
      queue: this.name,
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
  }

  /**
   * Sets the queue's timer to the next lease expiry or delay end, but only while someone
   * waits: everyone else sees due changes lazily, since every call advances the queue first.
   */
  arm(onDue: () => void): void {
    // Drop stale entries so the timer does not fire for changes that no longer apply.
    for (let top = this.timeline.peek(); top; top = this.timeline.peek()) {
      if (!top.message.removed && top.version === top.message.version) break;
      this.timeline.pop();
    }
    const next = this.timeline.peek();
    const wanted =
      (this.waiters.length > 0 || this.idleWaiters.length > 0) && next ? next.at : Number.POSITIVE_INFINITY;
    if (wanted === this.timerAt) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = wanted;
    if (!Number.isFinite(wanted)) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Number.POSITIVE_INFINITY;
        onDue();
      },
      Math.max(0, wanted - Date.now()),
    );
    // The broker alone must not keep a process alive; a long poll's own timeout does.
    this.timer.unref?.();
  }

  /** What a fault hook is told about a message. */
  target(message: StoredMessage): FaultTarget {
    return {
      queue: this.name,
      messageId: message.id,
      producerMessageId: message.producerId,
      deliveryCount: message.deliveryCount,
    };
  }

  toDelivery(message: StoredMessage): MemoryDelivery {
    const delivery: MemoryDelivery = {
      queue: this.name,
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

  maxDeliveriesDetail(message: StoredMessage): string {
    return `delivered ${message.deliveryCount} times without an ack (maxDeliveries ${this.settings.maxDeliveries})`;
  }
}

/** The ID fault hooks are keyed by: the producer's ID when there is one. */
export function faultId(message: StoredMessage): string {
  return message.producerId ?? message.id;
}
