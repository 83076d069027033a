/**
 * The store guard: fail closed while the store is down. A store step that finds it
 * unavailable pauses fetching, holds its deliveries (their leases kept) and runs again
 * once a probe finds the store back; past `outageHoldMs`, or when a lease is lost, the
 * deliveries are released to the broker.
 */
import type { ConsumerEvent } from '../types.js';
import type { Held, Pipeline } from './shared.js';

/** Probe interval while the store is down, growing to this cap. */
const OUTAGE_PROBE_MAX_MS = 2000;

export class StoreGuard {
  /** Set while the store is down: fetching pauses until a probe succeeds. */
  outage: Promise<void> | undefined;

  constructor(private readonly p: Pipeline<unknown, unknown>) {}

  /**
   * Runs a store step for held deliveries. When the store is unavailable, fetching
   * pauses, the deliveries are held (their leases kept) and the step re-run once the
   * store answers; after `outageHoldMs` (or when a lease is lost) they are released to
   * the broker. Returns undefined when they were released.
   */
  withStore<T>(held: readonly Held[], event: ConsumerEvent, step: () => Promise<T>): Promise<T | undefined> {
    const holdUntil = Date.now() + this.p.settings.outageHoldMs;
    // The usual case is the step's own promise with a handler for its failure: an async
    // function here cost a frame and an await twice per delivery.
    return step().catch((error: unknown) => this.waitOutOutage(held, event, step, holdUntil, error));
  }

  /** withStore after its step failed with `error`: waits out an outage and re-runs the step. */
  private async waitOutOutage<T>(
    held: readonly Held[],
    event: ConsumerEvent,
    step: () => Promise<T>,
    holdUntil: number,
    error: unknown,
  ): Promise<T | undefined> {
    for (;;) {
      if (this.p.store.classifyError(error) !== 'unavailable') throw error;
      this.enterOutage(error, event);
      const leases = AbortSignal.any(held.map((h) => h.keeper.signal));
      if (!(await this.waitForStore(holdUntil, leases))) {
        for (const { delivery, event: heldEvent } of held)
          await this.p.settlement.release(delivery, heldEvent);
        return undefined;
      }
      try {
        return await step();
      } catch (next) {
        error = next;
      }
    }
  }

  private enterOutage(error: unknown, event: ConsumerEvent): void {
    if (this.outage) return;
    const { adapter, log, events } = this.p;
    events.emit('storeUnavailable', { ...event, error });
    log.error('store unavailable: pausing fetching until it answers', { error });
    void adapter.pause?.().catch((pauseError) => log.warn('adapter pause failed', { error: pauseError }));
    this.outage = this.probeUntilBack().then((recovered) => {
      this.outage = undefined;
      if (recovered) {
        events.emit('storeRecovered', { consumer: this.p.settings.name });
        log.warn('store answers again: resuming');
        void adapter
          .resume?.()
          .catch((resumeError) => log.warn('adapter resume failed', { error: resumeError }));
      }
      this.p.lifecycle.wakeWaiters();
    });
  }

  /** Pings until the store answers (true) or the consumer stops (false). */
  private async probeUntilBack(): Promise<boolean> {
    for (let delay = 100; ; delay = Math.min(OUTAGE_PROBE_MAX_MS, delay * 2)) {
      await sleep(delay);
      if (this.p.lifecycle.state !== 'running') return false;
      try {
        await this.p.store.ping();
        return true;
      } catch {
        // still down
      }
    }
  }

  private async waitForStore(holdUntil: number, leaseSignal: AbortSignal): Promise<boolean> {
    const outage = this.outage;
    if (!outage) return true;
    const remaining = holdUntil - Date.now();
    const stopping = this.p.lifecycle.stopping.signal;
    if (remaining <= 0 || leaseSignal.aborted || stopping.aborted) return false;
    let giveUp!: () => void;
    const gaveUp = new Promise<false>((resolve) => {
      giveUp = () => resolve(false);
    });
    const timer = setTimeout(giveUp, remaining);
    // Removed again below: the consumer's stopping signal lives as long as the consumer.
    leaseSignal.addEventListener('abort', giveUp, { once: true });
    stopping.addEventListener('abort', giveUp, { once: true });
    try {
      return await Promise.race([outage.then(() => true as const), gaveUp]);
    } finally {
      clearTimeout(timer);
      leaseSignal.removeEventListener('abort', giveUp);
      stopping.removeEventListener('abort', giveUp);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
