/**
 * The consumer's lifecycle and its slots: start, the stop sequence (deadline, then the
 * grace for aborted deliveries to settle, then the adapter closes), how many deliveries
 * are in flight, and the lease keepers of the ones the pipeline holds.
 */
import { setMaxListeners } from 'node:events';
import { BrokerConnectionError, ConsumerStateError, isOncelyError, OncelyError } from '../errors.js';
import type { LeaseKeeper } from '../LeaseKeeper.js';
import type { AdapterRuntime } from '../types.js';
import { ABANDONED, type Held, type Marked, type Pipeline, settledWithin } from './shared.js';

type State = 'created' | 'running' | 'stopping' | 'stopped';

export class Lifecycle {
  state: State = 'created';
  /** Aborted when stop() begins (or start() fails): ends every wait of the pipeline. */
  readonly stopping = new AbortController();
  /** Handlers (and held deliveries) in flight right now. */
  inFlight = 0;
  /** The lease keeper of every delivery in the pipeline, with that delivery (stop() aborts and reports them). */
  readonly keepers = new Map<LeaseKeeper, Held>();
  /**
   * Take-backs of counted runs released during stop() that are still running after their
   * release went ahead without them (a release waits at most UNCOUNT_WAIT_MS): stop()
   * waits for them before it resolves.
   */
  readonly takeBacks = new Set<Promise<void>>();
  private readonly waiters: Array<() => void> = [];
  private stopPromise: Promise<void> | undefined;
  /**
   * The adapter's start(), settled either way (never rejecting; true once it started):
   * stop() waits for it before it stops the adapter. Undefined until adapter.start() is
   * called, so an adapter never started is only closed.
   */
  private adapterStarting: Promise<boolean> | undefined;
  /** Unregisters the dead-letter gauges (stop() does it first); a no-op until they are registered. */
  private unobserveDeadLetters: () => void = () => {};

  constructor(private readonly p: Pipeline<unknown, unknown>) {
    // Every delivery waiting out a store outage listens here until its wait ends (stop()
    // must end it), so up to `concurrency` of them at once, besides the adapter's own few.
    // Past Node's default of 10 it warned of a leak during every outage at concurrency > 10.
    setMaxListeners(p.settings.concurrency + 10, this.stopping.signal);
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    if (this.state !== 'created') throw new ConsumerStateError(`start() called on a ${this.state} consumer`);
    this.state = 'running';
    const { adapter, store } = this.p;
    try {
      // Fail fast on a store that cannot work (unreachable, schema not migrated) rather
      // than start fetching messages that could only be held and released.
      await store.ping();
      // stop() overtook this start during the ping: it has already closed the adapter (and
      // resolved). Starting it now would fetch after stop() returned, on a closed adapter
      // (and a store the consumer built is closed with it): resolve without starting.
      if (this.stopping.signal.aborted) return;
      // An async wrapper: an adapter whose start() throws synchronously is a rejection too.
      const starting = (async () => adapter.start(runtime))();
      this.adapterStarting = starting.then(
        () => true,
        () => false,
      );
      await starting.catch((error: unknown) => {
        // The client's own error (ECONNREFUSED, ENOTFOUND...) says neither broker nor address.
        throw isOncelyError(error)
          ? error
          : new BrokerConnectionError(adapter.type, adapter.address, { cause: error });
      });
      // stop() ran meanwhile (during the ping or the adapter's start): it already called
      // the still no-op unobserve, so gauges registered now would never be removed.
      if (!this.stopping.signal.aborted) this.observeDeadLetters();
    } catch (error) {
      // A stop() that overtook this start closes the adapter itself: not a second time here.
      if (!this.stopPromise) {
        this.state = 'stopped';
        this.stopping.abort();
        await adapter.close().catch(() => {});
      }
      throw error;
    }
  }

  stop(): Promise<void> {
    this.stopPromise ??= this.shutdown();
    return this.stopPromise;
  }

  private async shutdown(): Promise<void> {
    // Never started, or start() failed and already closed the adapter.
    if (this.state === 'created' || this.state === 'stopped') {
      this.state = 'stopped';
      return;
    }
    const { adapter, log, settings } = this.p;
    this.state = 'stopping';
    // First: a collection during the stop would ask an adapter that is closing.
    this.unobserveDeadLetters();
    this.stopping.abort();
    this.wakeWaiters();
    const deadline = Date.now() + settings.stopTimeoutMs;
    const starting = this.adapterStarting;
    if (!starting) {
      // stop() overtook start() during the store check: the adapter was never started,
      // so there is nothing to stop; its close still frees what its constructor built.
      await adapter.close().catch((error) => log.warn('adapter close failed', { error }));
      this.state = 'stopped';
      return;
    }
    // The adapter may still be starting (connecting, declaring, joining its group):
    // stopping and closing it under its start left what the start then built (a
    // consumer, a subscription, a socket) running after stop() resolved. Wait for it,
    // within the stop deadline, and stop what it started.
    const started = await outcomeWithin(starting, settings.stopTimeoutMs);
    if (started === undefined) {
      // Bounded like the rest of stop(): the adapter is stopped and closed under its start
      // now, and once more when that start ends (below), so what it built then does not
      // stay open.
      log.warn(
        "the adapter's start was still running at the stop deadline: it is closed now, and again once its start ends",
        { stopTimeoutMs: settings.stopTimeoutMs },
      );
    }
    // A start that failed has nothing to stop (start() rejects; the close is ours).
    if (started !== false) await adapter.stop().catch((error) => log.warn('adapter stop failed', { error }));
    this.p.batcher?.drain();
    if (!(await this.drained(Math.max(0, deadline - Date.now())))) {
      log.warn('stop deadline passed with handlers in flight: aborting their signals', {
        inFlight: this.inFlight,
      });
      for (const keeper of this.keepers.keys())
        keeper.abort(new OncelyError('SHUTDOWN', 'consumer stop deadline passed'));
    }
    // The aborted runs still roll back, take back their counts and release their messages,
    // through the store and the adapter: both stay open until every one has settled. Its
    // own bound, not stopTimeoutMs: a short stop deadline must not cut a release short,
    // which would leave the message invisible until its lease lapses.
    const graceEnds = Date.now() + settings.stopGraceMs;
    if (!(await this.drained(settings.stopGraceMs))) this.abandonUnsettled();
    await settledWithin(
      Promise.all(this.takeBacks).then(() => {}),
      Math.max(0, graceEnds - Date.now()),
    );
    await adapter.close().catch((error) => log.warn('adapter close failed', { error }));
    if (started === undefined) {
      // Ended meanwhile: closed again before stop() resolves; else whenever it ends.
      const late = await outcomeWithin(starting, 0);
      if (late !== undefined) await this.closeLateStart(late);
      else void starting.then((ended) => this.closeLateStart(ended));
    }
    this.state = 'stopped';
  }

  /**
   * An adapter start that ended after stop() had stopped waiting for it and closed the
   * adapter: stop (when it started) and close it again, which ends what the start built
   * after the first close. Never rejects.
   */
  private async closeLateStart(started: boolean): Promise<void> {
    const { adapter, log } = this.p;
    if (started) await adapter.stop().catch((error) => log.warn('adapter stop failed', { error }));
    await adapter.close().catch((error) => log.warn('adapter close failed', { error }));
  }

  /**
   * The dead-letter gauges, where the adapter can count its dead-letter queue. Each
   * collection asks the adapter's own client (one call on the connection it already has):
   * a connection per collection would cost a TLS handshake and broker-side churn every
   * export interval.
   */
  private observeDeadLetters(): void {
    const { adapter, telemetry, log } = this.p;
    if (!adapter.deadLetterBacklog) return;
    try {
      this.unobserveDeadLetters = telemetry.observeDeadLetterBacklog(
        (signal) => adapter.deadLetterBacklog!(signal),
        log,
      );
    } catch (error) {
      // A meter that refuses the instruments costs the gauges, not the consumer.
      log.warn('dead-letter gauges could not be registered', { error });
    }
  }

  /**
   * The grace ran out with deliveries unsettled (a handler that ignores `ctx.signal`, a
   * broker that does not answer): the adapter closes under them. Each is logged and
   * counted now, since a settlement can no longer reach the broker; the broker hands the
   * message out again once its lease lapses.
   */
  private abandonUnsettled(): void {
    for (const { delivery, event } of this.keepers.values()) {
      (delivery as Marked)[ABANDONED] = true;
      const error = new OncelyError(
        'SHUTDOWN',
        `stopGraceMs (${this.p.settings.stopGraceMs} ms) passed before this delivery was settled: the adapter closes, and the broker redelivers the message after its lease`,
      );
      this.p.log.error('stop grace passed with a delivery unsettled: it returns after its lease', {
        ...event,
        error,
      });
      this.p.events.emit('ackFailed', { ...event, error });
    }
  }

  private async drained(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.inFlight > 0 && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(50, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.inFlight === 0;
  }

  /** Free slots once there are any (the adapter fetches that many); 0 once stopping. Waits out a store outage. */
  async whenReady(): Promise<number> {
    for (;;) {
      if (this.state !== 'running') return 0;
      const outage = this.p.guard.outage;
      if (outage) {
        await Promise.race([outage, this.nextWake()]);
        continue;
      }
      const free = this.p.settings.concurrency - this.inFlight;
      if (free > 0) return free;
      await this.nextWake();
    }
  }

  private nextWake(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  wakeWaiters(): void {
    // Runs after every delivery: no copy of an empty list.
    if (this.waiters.length === 0) return;
    for (const wake of this.waiters.splice(0)) wake();
  }
}

/** What `outcome` settles with, or undefined when it has not within `ms`. */
async function outcomeWithin<T>(outcome: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([outcome, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
