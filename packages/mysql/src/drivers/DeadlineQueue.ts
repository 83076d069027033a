/** One wait bounded by a {@link DeadlineQueue}. */
export interface Deadline {
  /** performance.now() at which the wait gives up. */
  readonly at: number;
  readonly expire: () => void;
}

/**
 * Deadlines of one length (`ms`) on one shared timer: the pool-wait bound of every
 * checkout and the query timeout of every statement. A `setTimeout`/`clearTimeout` per
 * wait cost five timers per `processOnce` (a timer list created and dropped each time),
 * measurable against the same statements on a bare mysql2 pool (issue 31's bench). Every
 * entry waits the same `ms`, so entries expire in the order they were added: the timer
 * only ever fires for the oldest, and adding or removing an entry is a Set operation.
 * The timer is unref'd: the pending work (a socket, a queued checkout) keeps the process
 * alive, not the bound.
 */
export class DeadlineQueue {
  private readonly entries = new Set<Deadline>();
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(readonly ms: number) {}

  /** Calls `expire` once `ms` have passed, unless {@link remove} is called first. */
  add(expire: () => void): Deadline {
    const entry: Deadline = { at: performance.now() + this.ms, expire };
    this.entries.add(entry);
    this.timer ??= this.arm(this.ms);
    return entry;
  }

  /** The wait ended in time. The timer stays armed; firing with nothing due is a no-op. */
  remove(entry: Deadline): void {
    this.entries.delete(entry);
  }

  private arm(delayMs: number): ReturnType<typeof setTimeout> {
    const timer = setTimeout(() => this.fire(), delayMs);
    timer.unref?.();
    return timer;
  }

  private fire(): void {
    this.timer = undefined;
    const now = performance.now();
    const due: Deadline[] = [];
    for (const entry of this.entries) {
      if (entry.at > now) {
        // The oldest entry still waiting: the timer fires again at its deadline.
        this.timer = this.arm(Math.max(1, Math.ceil(entry.at - now)));
        break;
      }
      due.push(entry);
    }
    // Re-armed before any expiry runs: one that throws cannot leave the others unbounded.
    for (const entry of due) this.entries.delete(entry);
    for (const entry of due) entry.expire();
  }
}
