import { randomBytes } from 'node:crypto';
import type { EntitySettings } from './config.js';

/** A decoded AMQP message as rhea represents it (properties, annotations, body section). */
export type AmqpMessage = Record<string, any> & {
  message_id?: unknown;
  group_id?: string;
  ttl?: number;
  application_properties?: Record<string, unknown>;
  message_annotations?: Record<string, unknown>;
};

/** Where a stored message is in its life. */
export type MessageState = 'active' | 'deferred' | 'scheduled';

/** A message lock: what a lock token (and the delivery tag that carries it) stands for. */
export interface MessageLock {
  /** The lock token as a GUID string (.NET byte order undone). */
  token: string;
  until: number;
  timer?: NodeJS.Timeout;
  /** The outbound link it was delivered on (absent for receive-by-sequence-number). */
  holder?: LockHolder;
}

/** Whatever holds locks: an outbound link (the emulator's sender to a client receiver). */
export interface LockHolder {
  readonly id: number;
  readonly sessionId?: string;
}

export interface StoredMessage {
  seq: number;
  amqp: AmqpMessage;
  enqueuedAt: number;
  /** Failed deliveries so far (abandon, lock expiry): the AMQP header's `delivery_count`. */
  failedDeliveries: number;
  state: MessageState;
  /** Scheduled enqueue time (state `scheduled`). */
  visibleAt: number;
  expiresAt: number;
  sessionId?: string;
  lock?: MessageLock;
  /** Sitting in its ready heap. */
  queued: boolean;
  timer?: NodeJS.Timeout;
}

/** Why a message reached `$DeadLetterQueue`. */
export interface DeadLetterInfo {
  reason: string;
  description?: string;
}

/** A per-session record: the lock on the session and its state. */
export interface SessionRecord {
  id: string;
  state: Buffer | undefined;
  holder: LockHolder | undefined;
  lockedUntil: number;
  timer?: NodeJS.Timeout;
}

/** Callbacks an entity uses to reach the server. */
export interface EntityHooks {
  /** New work may be deliverable: the server runs its delivery pump soon. */
  wake(entity: MessageEntity): void;
  /** A session lock ran out: the server closes the holder's link. */
  sessionLockLost(entity: MessageEntity, session: SessionRecord): void;
}

/** Min-heap of sequence numbers. */
class SeqHeap {
  private readonly items: number[] = [];
  get size(): number {
    return this.items.length;
  }
  peek(): number | undefined {
    return this.items[0];
  }
  push(value: number): void {
    const a = this.items;
    a.push(value);
    let i = a.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (a[parent]! <= a[i]!) break;
      [a[parent], a[i]] = [a[i]!, a[parent]!];
      i = parent;
    }
  }
  pop(): number | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && a[l]! < a[m]!) m = l;
        if (r < a.length && a[r]! < a[m]!) m = r;
        if (m === i) break;
        [a[m], a[i]] = [a[i]!, a[m]!];
        i = m;
      }
    }
    return top;
  }
}

/** Service Bus's reason for a message dead-lettered after too many deliveries. */
export const MAX_DELIVERY_COUNT_EXCEEDED = 'MaxDeliveryCountExceeded';
/** Service Bus's reason for a message dead-lettered on expiry. */
export const TTL_EXPIRED = 'TTLExpiredException';

/**
 * One queue, subscription or dead-letter queue: its messages, locks and sessions.
 * Sequence numbers are per entity and start at 1. Messages wait in min-heaps of
 * sequence numbers (one per session), so an abandoned or expired-lock message goes back
 * to its place at the front.
 */
export class MessageEntity {
  readonly messages = new Map<number, StoredMessage>();
  readonly locks = new Map<string, StoredMessage>();
  readonly sessions = new Map<string, SessionRecord>();
  private readonly ready = new Map<string, SeqHeap>();
  private nextSeq = 1;
  /** The `$DeadLetterQueue` sub-entity (absent on a dead-letter queue itself). */
  readonly deadLetterQueue: MessageEntity | undefined;

  constructor(
    /** Entity path as clients address it, e.g. `orders` or `events/Subscriptions/audit`. */
    readonly path: string,
    public settings: EntitySettings,
    private readonly hooks: EntityHooks,
    isDeadLetterQueue = false,
  ) {
    this.deadLetterQueue = isDeadLetterQueue
      ? undefined
      : new MessageEntity(`${path}/$DeadLetterQueue`, { ...settings, requiresSession: false }, hooks, true);
  }

  get isDeadLetterQueue(): boolean {
    return this.deadLetterQueue === undefined;
  }

  // ------------------------------------------------------------------------------------
  // Enqueueing
  // ------------------------------------------------------------------------------------

  /** Stores a message (scheduled when `scheduledAt` is in the future) and returns its sequence number. */
  enqueue(amqp: AmqpMessage, options: { scheduledAt?: number; failedDeliveries?: number } = {}): number {
    const now = Date.now();
    const seq = this.nextSeq++;
    const ttl = typeof amqp.ttl === 'number' && amqp.ttl > 0 ? amqp.ttl : Number.POSITIVE_INFINITY;
    const scheduledAt = options.scheduledAt ?? 0;
    const stored: StoredMessage = {
      seq,
      amqp,
      enqueuedAt: Math.max(now, scheduledAt),
      failedDeliveries: options.failedDeliveries ?? 0,
      state: scheduledAt > now ? 'scheduled' : 'active',
      visibleAt: scheduledAt,
      expiresAt: Math.max(now, scheduledAt) + Math.min(ttl, this.settings.defaultTtlMs),
      sessionId: typeof amqp.group_id === 'string' ? amqp.group_id : undefined,
      queued: false,
    };
    this.messages.set(seq, stored);
    if (stored.state === 'scheduled') {
      stored.timer = unrefTimer(() => this.activateScheduled(stored), scheduledAt - now);
    } else {
      this.makeAvailable(stored);
    }
    return seq;
  }

  private activateScheduled(stored: StoredMessage): void {
    if (this.messages.get(stored.seq) !== stored || stored.state !== 'scheduled') return;
    // This timer has fired: clear it, or makeAvailable takes it for the expiry timer and
    // never arms one (the message would not expire until something touched it).
    stored.timer = undefined;
    stored.state = 'active';
    stored.enqueuedAt = Date.now();
    this.makeAvailable(stored);
  }

  /** Removes a scheduled message. */
  cancelScheduled(seq: number): boolean {
    const stored = this.messages.get(seq);
    if (stored?.state !== 'scheduled') return false;
    this.remove(stored);
    return true;
  }

  /**
   * Batch delete (`com.microsoft:batch-delete-messages`): removes up to `count` messages
   * enqueued before `before`, oldest first, and returns how many. As on the service, locked
   * messages are not eligible; deferred ones are. Scheduled messages are not enqueued yet
   * (cancel-scheduled-message removes those). `sessionId` limits it to one session; without
   * it, the messages of sessions another receiver holds are locked too.
   * The cutoff is inclusive: AMQP timestamps count milliseconds, and a purge "up to now"
   * must take the message enqueued in the same millisecond as its request.
   */
  deleteOldest(count: number, before: number, sessionId?: string): number {
    const eligible: StoredMessage[] = [];
    for (const stored of this.messages.values()) {
      if (stored.lock || stored.state === 'scheduled' || stored.enqueuedAt > before) continue;
      if (sessionId !== undefined && stored.sessionId !== sessionId) continue;
      // A held session lock covers every message of the session, received or not: a
      // request from outside the session (no session-id) leaves them to their holder.
      if (
        sessionId === undefined &&
        stored.sessionId !== undefined &&
        this.sessions.get(stored.sessionId)?.holder
      )
        continue;
      eligible.push(stored);
    }
    eligible.sort((a, b) => a.enqueuedAt - b.enqueuedAt || a.seq - b.seq);
    const doomed = eligible.slice(0, count);
    for (const stored of doomed) this.remove(stored);
    return doomed.length;
  }

  /** Puts an unlocked, active message in its ready heap and wakes the pump. */
  private makeAvailable(stored: StoredMessage): void {
    if (stored.state !== 'active' || stored.lock || stored.queued) return;
    if (this.expireIfDue(stored)) return;
    // Only a session entity serves by session. A message that carries a SessionId on an
    // entity without sessions (the dead-letter sub-queue of a session queue, a plain queue
    // given one) is for any receiver, as on Service Bus.
    const key = this.settings.requiresSession ? (stored.sessionId ?? '') : '';
    let heap = this.ready.get(key);
    if (!heap) {
      heap = new SeqHeap();
      this.ready.set(key, heap);
    }
    heap.push(stored.seq);
    stored.queued = true;
    if (Number.isFinite(stored.expiresAt) && !stored.timer) this.armExpiry(stored);
    this.hooks.wake(this);
  }

  /**
   * Expires `stored` when its time to live runs out. A timer can fire a millisecond
   * before `Date.now()` reaches the deadline (timers run on the monotonic clock): then
   * it is armed again rather than leaving the message unexpired until someone touches it.
   */
  private armExpiry(stored: StoredMessage): void {
    stored.timer = unrefTimer(
      () => {
        stored.timer = undefined;
        if (this.expireIfDue(stored)) return;
        if (this.messages.get(stored.seq) === stored && !stored.lock && stored.expiresAt > Date.now()) {
          this.armExpiry(stored);
        }
      },
      Math.max(1, stored.expiresAt - Date.now()),
    );
  }

  /** Expires an unlocked message past its time to live; true when it did. */
  private expireIfDue(stored: StoredMessage): boolean {
    if (stored.lock || stored.expiresAt > Date.now() || this.messages.get(stored.seq) !== stored)
      return false;
    this.remove(stored);
    if (this.settings.deadLetteringOnMessageExpiration && this.deadLetterQueue) {
      this.moveToDeadLetter(stored, {
        reason: TTL_EXPIRED,
        description: 'The message expired and was dead lettered.',
      });
    }
    return true;
  }

  // ------------------------------------------------------------------------------------
  // Handing out
  // ------------------------------------------------------------------------------------

  /** Takes the next available message of a session (`''` = no session), or undefined. */
  takeNext(sessionKey: string): StoredMessage | undefined {
    const heap = this.ready.get(sessionKey);
    if (!heap) return undefined;
    for (;;) {
      const seq = heap.pop();
      if (seq === undefined) {
        this.ready.delete(sessionKey);
        return undefined;
      }
      const stored = this.messages.get(seq);
      if (!stored?.queued) continue;
      stored.queued = false;
      if (stored.state !== 'active' || stored.lock) continue;
      if (this.expireIfDue(stored)) continue;
      return stored;
    }
  }

  /** A session with an available message that nobody holds, for accept-next-session. */
  nextFreeSession(): string | undefined {
    const candidates: Array<{ id: string; seq: number }> = [];
    for (const [key, heap] of this.ready) {
      if (key === '' || heap.size === 0) continue;
      const record = this.sessions.get(key);
      if (record?.holder) continue;
      if (!this.hasAvailable(key)) continue;
      candidates.push({ id: key, seq: heap.peek()! });
    }
    candidates.sort((a, b) => a.seq - b.seq);
    return candidates[0]?.id;
  }

  private hasAvailable(key: string): boolean {
    const heap = this.ready.get(key);
    if (!heap) return false;
    while (heap.size > 0) {
      const stored = this.messages.get(heap.peek()!);
      if (stored?.queued && stored.state === 'active' && !stored.lock) return true;
      heap.pop();
      if (stored) stored.queued = false;
    }
    return false;
  }

  /** Locks a message for a holder and returns the lock (the token is a fresh GUID). */
  lock(
    stored: StoredMessage,
    holder: LockHolder | undefined,
    until: number,
    withTimer: boolean,
  ): MessageLock {
    const token = formatGuid(randomBytes(16));
    const lock: MessageLock = { token, until, holder };
    stored.lock = lock;
    this.locks.set(token, stored);
    if (withTimer) lock.timer = unrefTimer(() => this.lockExpired(stored, token), until - Date.now());
    return lock;
  }

  private lockExpired(stored: StoredMessage, token: string): void {
    if (stored.lock?.token !== token) return;
    this.failDelivery(stored);
  }

  /** The message a lock token stands for, while the lock is valid. */
  lockedBy(token: string): StoredMessage | undefined {
    const stored = this.locks.get(token);
    if (!stored || stored.lock?.token !== token) {
      this.locks.delete(token);
      return undefined;
    }
    if (stored.lock.until <= Date.now()) {
      // The timer may not have fired yet: treat the lock as gone now.
      if (stored.lock.timer) {
        this.failDelivery(stored);
      }
      return undefined;
    }
    return stored;
  }

  /** Renews a message lock; returns the new expiry or undefined when the lock is gone. */
  renewLock(token: string): number | undefined {
    const stored = this.lockedBy(token);
    if (!stored?.lock) return undefined;
    const until = Date.now() + this.settings.lockDurationMs;
    stored.lock.until = until;
    if (stored.lock.timer) {
      clearTimeout(stored.lock.timer);
      stored.lock.timer = unrefTimer(() => this.lockExpired(stored, token), until - Date.now());
    }
    return until;
  }

  private unlock(stored: StoredMessage): void {
    if (!stored.lock) return;
    clearTimeout(stored.lock.timer);
    this.locks.delete(stored.lock.token);
    stored.lock = undefined;
  }

  // ------------------------------------------------------------------------------------
  // Settlement
  // ------------------------------------------------------------------------------------

  /** complete: the message is gone. */
  complete(stored: StoredMessage): void {
    this.unlock(stored);
    this.remove(stored);
  }

  /**
   * abandon (and lock expiry): the delivery count goes up; past MaxDeliveryCount the
   * message moves to the dead-letter queue with `MaxDeliveryCountExceeded`.
   */
  abandon(stored: StoredMessage, propertiesToModify?: Record<string, unknown>): void {
    this.modify(stored, propertiesToModify);
    this.failDelivery(stored);
  }

  /** Gives a message back without counting a failed delivery (AMQP `released`). */
  release(stored: StoredMessage): void {
    this.unlock(stored);
    this.makeAvailable(stored);
  }

  private failDelivery(stored: StoredMessage): void {
    this.unlock(stored);
    stored.failedDeliveries++;
    if (!this.isDeadLetterQueue && stored.failedDeliveries >= this.settings.maxDeliveryCount) {
      this.remove(stored);
      this.moveToDeadLetter(stored, {
        reason: MAX_DELIVERY_COUNT_EXCEEDED,
        description: `Message could not be consumed after ${this.settings.maxDeliveryCount} delivery attempts.`,
      });
      return;
    }
    if (stored.state === 'active') this.makeAvailable(stored);
    else if (stored.state === 'deferred') this.expireIfDue(stored);
  }

  /** defer: only receive-by-sequence-number can get it again. */
  defer(stored: StoredMessage, propertiesToModify?: Record<string, unknown>): void {
    this.modify(stored, propertiesToModify);
    this.unlock(stored);
    stored.state = 'deferred';
  }

  /** dead-letter with a reason and description. */
  deadLetter(
    stored: StoredMessage,
    info: DeadLetterInfo,
    propertiesToModify?: Record<string, unknown>,
  ): void {
    this.modify(stored, propertiesToModify);
    this.unlock(stored);
    this.remove(stored);
    if (this.deadLetterQueue) this.moveToDeadLetter(stored, info);
  }

  /** Receive-and-delete: the message is gone as it is handed out. */
  take(stored: StoredMessage): void {
    this.unlock(stored);
    this.remove(stored);
  }

  private modify(stored: StoredMessage, properties?: Record<string, unknown>): void {
    if (!properties || Object.keys(properties).length === 0) return;
    stored.amqp = {
      ...stored.amqp,
      application_properties: { ...(stored.amqp.application_properties ?? {}), ...properties },
    };
  }

  private moveToDeadLetter(stored: StoredMessage, info: DeadLetterInfo): void {
    const dlq = this.deadLetterQueue;
    if (!dlq) return;
    const amqp: AmqpMessage = {
      ...stored.amqp,
      application_properties: {
        ...(stored.amqp.application_properties ?? {}),
        DeadLetterReason: info.reason,
        ...(info.description === undefined ? {} : { DeadLetterErrorDescription: info.description }),
      },
      message_annotations: {
        ...(stored.amqp.message_annotations ?? {}),
        'x-opt-deadletter-source': this.path,
      },
    };
    // Dead letters do not expire (the service keeps them until they are received).
    delete amqp.ttl;
    dlq.enqueue(amqp, { failedDeliveries: stored.failedDeliveries });
  }

  private remove(stored: StoredMessage): void {
    clearTimeout(stored.timer);
    stored.timer = undefined;
    this.unlock(stored);
    stored.queued = false;
    this.messages.delete(stored.seq);
  }

  // ------------------------------------------------------------------------------------
  // Sessions
  // ------------------------------------------------------------------------------------

  session(id: string): SessionRecord {
    let record = this.sessions.get(id);
    if (!record) {
      record = { id, state: undefined, holder: undefined, lockedUntil: 0 };
      this.sessions.set(id, record);
    }
    return record;
  }

  /** Locks a session for a holder; false when another holder has it. */
  acquireSession(id: string, holder: LockHolder): boolean {
    const record = this.session(id);
    if (record.holder && record.holder !== holder) return false;
    record.holder = holder;
    this.renewSession(record);
    return true;
  }

  renewSession(record: SessionRecord): number {
    record.lockedUntil = Date.now() + this.settings.lockDurationMs;
    this.armSessionExpiry(record);
    // Messages of a locked session share the session's lock.
    for (const stored of this.messages.values()) {
      if (stored.lock && stored.lock.holder === record.holder && stored.sessionId === record.id) {
        stored.lock.until = record.lockedUntil;
      }
    }
    return record.lockedUntil;
  }

  /**
   * Ends the session lock when it runs out. A timer can fire before `Date.now()` reaches
   * `lockedUntil` (timers run on the monotonic clock): then it is armed again, or the
   * session would stay locked, and accept-next-session waiters unserved, for good.
   */
  private armSessionExpiry(record: SessionRecord): void {
    clearTimeout(record.timer);
    record.timer = unrefTimer(
      () => {
        const holder = record.holder;
        if (!holder) return;
        if (record.lockedUntil > Date.now()) {
          this.armSessionExpiry(record);
          return;
        }
        this.releaseSession(record, holder);
        this.hooks.sessionLockLost(this, record);
      },
      Math.max(1, record.lockedUntil - Date.now()),
    );
  }

  /** Ends a holder's session lock: its locked messages come back with a higher delivery count. */
  releaseSession(record: SessionRecord, holder: LockHolder): void {
    if (record.holder !== holder) return;
    record.holder = undefined;
    record.lockedUntil = 0;
    clearTimeout(record.timer);
    for (const stored of [...this.messages.values()]) {
      if (stored.lock?.holder === holder) this.failDelivery(stored);
    }
    this.hooks.wake(this);
  }

  /** Drops a holder's locks without counting (used by the test hook that expires locks). */
  locksOf(holder: LockHolder): StoredMessage[] {
    return [...this.messages.values()].filter((m) => m.lock?.holder === holder);
  }

  /** Expires the locks of the messages `select` picks now, as if their lock duration had passed. */
  expireLocks(select: (message: AmqpMessage) => boolean): number {
    let expired = 0;
    for (const stored of [...this.messages.values()]) {
      if (stored.lock && select(stored.amqp)) {
        expired++;
        this.failDelivery(stored);
      }
    }
    return expired;
  }

  /** Counts by state, for inspection. */
  counts(): { active: number; locked: number; deferred: number; scheduled: number; total: number } {
    let active = 0;
    let locked = 0;
    let deferred = 0;
    let scheduled = 0;
    for (const stored of this.messages.values()) {
      if (stored.lock) locked++;
      else if (stored.state === 'active') active++;
      if (stored.state === 'deferred') deferred++;
      if (stored.state === 'scheduled') scheduled++;
    }
    return { active, locked, deferred, scheduled, total: this.messages.size };
  }

  /** Stops every timer (emulator stop). */
  dispose(): void {
    for (const stored of this.messages.values()) {
      clearTimeout(stored.timer);
      clearTimeout(stored.lock?.timer);
    }
    for (const record of this.sessions.values()) clearTimeout(record.timer);
    this.deadLetterQueue?.dispose();
  }
}

function unrefTimer(fn: () => void, ms: number): NodeJS.Timeout {
  const timer = setTimeout(fn, Math.max(0, Math.min(ms, 2_147_483_647)));
  timer.unref();
  return timer;
}

/** Formats 16 bytes as a GUID string in byte order (what `uuid_to_string` does). */
export function formatGuid(bytes: Buffer): string {
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Parses a GUID string to its 16 bytes in byte order. */
export function guidBytes(guid: string): Buffer {
  return Buffer.from(guid.replaceAll('-', ''), 'hex');
}

/**
 * Swaps a GUID between byte order and .NET's mixed-endian layout (the first three
 * groups little-endian). Its own inverse. The delivery tag carries the lock token in
 * .NET order; the client swaps it back (`reorderLockToken`).
 */
export function dotNetGuidOrder(bytes: Buffer): Buffer {
  return Buffer.from([
    bytes[3]!,
    bytes[2]!,
    bytes[1]!,
    bytes[0]!,
    bytes[5]!,
    bytes[4]!,
    bytes[7]!,
    bytes[6]!,
    ...bytes.subarray(8),
  ]);
}
