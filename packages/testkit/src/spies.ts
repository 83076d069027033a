import type { ConsumerEvent, ConsumerEventName } from '@oncely/core';
import { WaitTimeoutError } from './errors.js';

/**
 * The default deadline of every wait here (`waitFor`, `ConsumerSpy.waitFor`, `waitForCount`):
 * a bound for a hang, not a speed target. 20 s, so a loaded CI machine does not fail a
 * healthy wait, and still under every vitest project's test timeout (30 s or more), so the
 * descriptive {@link WaitTimeoutError} comes before vitest's own.
 */
const DEFAULT_WAIT_MS = 20_000;

/** Every event name a consumer emits, so a spy can listen to all of them. */
const EVENT_NAMES: readonly ConsumerEventName[] = [
  'received',
  'processed',
  'duplicate',
  'failed',
  'retried',
  'deadLettered',
  'leaseRenewed',
  'leaseLost',
  'ackFailed',
  'takeover',
  'storeUnavailable',
  'storeRecovered',
  'released',
];

/**
 * The part of a `Consumer` a spy needs (structural, so any copy of core fits).
 *
 * @example
 * ```ts
 * const source: EventSource = consumer;
 * ```
 */
export interface EventSource {
  on(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): unknown;
  off(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): unknown;
}

/**
 * One recorded consumer event.
 *
 * @example
 * ```ts
 * const first: RecordedEvent = await spy.waitFor('processed');
 * console.log(first.source, first.event.messageId);
 * ```
 */
export interface RecordedEvent {
  name: ConsumerEventName;
  event: ConsumerEvent;
  /** Label of the consumer that emitted it (as given to `attach`). */
  source: string;
  /** Epoch ms when the spy saw it. */
  at: number;
  /** Position in the spy's record, from 0. */
  index: number;
}

type Predicate = (recorded: RecordedEvent) => boolean;

interface Waiter {
  name: ConsumerEventName;
  predicate: Predicate;
  count: number;
  resolve(events: RecordedEvent[]): void;
}

/**
 * Records the events of one or more consumers, counts them and waits for them, so tests
 * wait on what happened instead of sleeping. Waits consider events already recorded.
 *
 * @example
 * ```ts
 * const spy = new ConsumerSpy().attach(consumer, 'a');
 * await consumer.start();
 * await spy.waitFor('processed', (e) => e.event.messageId === 'order-1', 5000);
 * expect(spy.count('duplicate')).toBe(0);
 * ```
 */
export class ConsumerSpy {
  /** Every event seen, in order. */
  readonly events: RecordedEvent[] = [];
  private readonly waiters = new Set<Waiter>();
  private readonly detachers: Array<() => void> = [];

  /** Starts recording `source`'s events under `label`. */
  attach(source: EventSource, label = `consumer-${this.detachers.length + 1}`): this {
    for (const name of EVENT_NAMES) {
      const listener = (event: ConsumerEvent) => this.record(name, event, label);
      source.on(name, listener);
      this.detachers.push(() => source.off(name, listener));
    }
    return this;
  }

  /** Stops recording (keeps what was recorded). */
  detach(): void {
    for (const detach of this.detachers.splice(0)) detach();
  }

  /** Events named `name`, optionally filtered. */
  list(name: ConsumerEventName, predicate: Predicate = () => true): RecordedEvent[] {
    return this.events.filter((e) => e.name === name && predicate(e));
  }

  /** How many events named `name` matched `predicate`. */
  count(name: ConsumerEventName, predicate?: Predicate): number {
    return this.list(name, predicate).length;
  }

  /** How many events named `name` concern `messageId` (for `received`: the receipts of that ID). */
  countFor(name: ConsumerEventName, messageId: string | undefined): number {
    return this.count(name, (e) => e.event.messageId === messageId);
  }

  /**
   * Resolves with the first event named `name` matching `predicate` (already recorded or
   * yet to come); rejects with a {@link WaitTimeoutError} after `timeoutMs` (default 20 s).
   */
  async waitFor(
    name: ConsumerEventName,
    predicate: Predicate = () => true,
    timeoutMs = DEFAULT_WAIT_MS,
  ): Promise<RecordedEvent> {
    const [first] = await this.waitForCount(name, 1, predicate, timeoutMs);
    return first!;
  }

  /** Resolves once `count` events named `name` matched `predicate`; rejects after `timeoutMs` (default 20 s). */
  waitForCount(
    name: ConsumerEventName,
    count: number,
    predicate: Predicate = () => true,
    timeoutMs = DEFAULT_WAIT_MS,
  ): Promise<RecordedEvent[]> {
    const seen = this.list(name, predicate);
    if (seen.length >= count) return Promise.resolve(seen.slice(0, count));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        name,
        predicate,
        count,
        resolve: (events) => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve(events);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        const got = this.count(name, predicate);
        reject(
          new WaitTimeoutError(
            `${count} '${name}' event(s) matching the predicate`,
            timeoutMs,
            `${got} seen`,
          ),
        );
      }, timeoutMs);
      this.waiters.add(waiter);
    });
  }

  /** A one-line tally of every event name seen, for failure messages. */
  summary(): string {
    const counts = new Map<string, number>();
    for (const e of this.events) counts.set(e.name, (counts.get(e.name) ?? 0) + 1);
    return [...counts].map(([name, n]) => `${name}=${n}`).join(' ') || 'no events';
  }

  private record(name: ConsumerEventName, event: ConsumerEvent, source: string): void {
    const recorded: RecordedEvent = { name, event, source, at: Date.now(), index: this.events.length };
    this.events.push(recorded);
    for (const waiter of [...this.waiters]) {
      if (waiter.name !== name || !waiter.predicate(recorded)) continue;
      const matching = this.list(name, waiter.predicate);
      if (matching.length >= waiter.count) waiter.resolve(matching.slice(0, waiter.count));
    }
  }
}

/**
 * Options of {@link waitFor}.
 *
 * @example
 * ```ts
 * const options: WaitForOptions = { timeoutMs: 5000, intervalMs: 100, description: 'backlog 0' };
 * ```
 */
export interface WaitForOptions {
  /** A bound for a hang, not a speed target. @default 20000 */
  timeoutMs?: number;
  /** Delay between checks. @default 50 */
  intervalMs?: number;
  /** What is awaited, for the timeout error. @default 'the condition' */
  description?: string;
}

/**
 * Polls `condition` until it returns a truthy value (resolved with it) or the deadline
 * passes (rejects with a {@link WaitTimeoutError} naming `description` and the last value
 * seen). A condition that throws is retried; its last error is reported on timeout.
 *
 * @example
 * ```ts
 * await waitFor(async () => (await countEffects()) === 200, { timeoutMs: 30000, description: '200 effect rows' });
 * ```
 */
export async function waitFor<T>(
  condition: () => T | Promise<T>,
  options: WaitForOptions = {},
): Promise<NonNullable<T>> {
  const { timeoutMs = DEFAULT_WAIT_MS, intervalMs = 50, description = 'the condition' } = options;
  const deadline = Date.now() + timeoutMs;
  let lastSeen: unknown;
  for (;;) {
    try {
      const value = await condition();
      if (value) return value as NonNullable<T>;
      lastSeen = value;
    } catch (error) {
      lastSeen = error instanceof Error ? `${error.name}: ${error.message}` : error;
    }
    const left = deadline - Date.now();
    if (left <= 0) throw new WaitTimeoutError(description, timeoutMs, lastSeen);
    await new Promise((resolve) => setTimeout(resolve, Math.min(intervalMs, left)));
  }
}
