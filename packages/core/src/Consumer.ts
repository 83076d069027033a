import { randomUUID } from 'node:crypto';
import { EventEmitter, setMaxListeners } from 'node:events';
import { Batcher, Gathering } from './Batcher.js';
import { retryDelayMs } from './backoff.js';
import { decodeBody } from './body.js';
import { CONSUMER_DEFAULTS, DEFAULT_BATCH_MAX_WAIT_MS, validateConsumerConfig } from './config.js';
import {
  BrokerConnectionError,
  ConfigError,
  ConsumerStateError,
  isOncelyError,
  LeaseLostError,
  OncelyError,
} from './errors.js';
import { fingerprintDelivery } from './fingerprint.js';
import { describeIdStrategy, resolveMessageId } from './idStrategy.js';
import { LeaseKeeper } from './LeaseKeeper.js';
import { stderrLogger, toLogger } from './logger.js';
import type { PublishOptions } from './outbox.js';
import { outboxOf, toOutboxWrite } from './outbox.js';
import {
  type BatchItemResult,
  type BatchMessage,
  fingerprintStore,
  type OrderedBatchItemResult,
  processBatchOnce,
  processBatchTogether,
  retryTransient,
} from './processOnce.js';
import { Telemetry } from './telemetry.js';
import type {
  AdapterRuntime,
  BrokerAdapter,
  ConsumerConfig,
  ConsumerEvent,
  ConsumerEventName,
  DeadLetterReason,
  Delivery,
  HandlerContext,
  IdempotencyStore,
  Logger,
  Message,
  MessageKey,
  PayloadMismatch,
  SqlClient,
} from './types.js';

type State = 'created' | 'running' | 'stopping' | 'stopped';

/** Resolved config: every optional field filled in. */
type Settings<TBody, Tx> = Required<
  Omit<
    ConsumerConfig<TBody, Tx>,
    'idStrategy' | 'backoff' | 'batch' | 'payloadFingerprint' | 'telemetry' | 'handler' | 'batchHandler'
  >
> &
  // One of the two handlers is set (validateConsumerConfig).
  Pick<ConsumerConfig<TBody, Tx>, 'backoff' | 'batch' | 'payloadFingerprint' | 'handler' | 'batchHandler'> & {
    idStrategy: NonNullable<ConsumerConfig['idStrategy']>;
  };

/** How one attempt at the store ended. */
type Outcome =
  | { kind: 'processed' }
  | { kind: 'duplicate' }
  /** A duplicate whose payload fingerprint differs from the marker's. */
  | { kind: 'mismatch'; mismatch: PayloadMismatch }
  | { kind: 'exhausted' }
  | { kind: 'busy'; retryInMs: number }
  /** Given back without counting: the stop deadline aborted the handler. */
  | { kind: 'release' }
  | { kind: 'failed'; error: unknown };

/** A delivery the pipeline holds: its lease keeper runs until it is settled. */
interface Held {
  delivery: Delivery;
  keeper: LeaseKeeper;
  event: ConsumerEvent;
}

/** A held delivery with its ID, decoded message and attempt number: ready to run. */
interface Prepared<TBody> extends Held {
  key: MessageKey;
  attempt: number;
  message: Message<TBody>;
  /** With `payloadFingerprint`: this delivery's fingerprint, stored with its marker. */
  fingerprint?: string;
}

/** A delivery's place in an ordered batch (`dispatchInOrder`). */
interface Slot<TBody> {
  gathering: Gathering<Prepared<TBody>>;
  index: number;
  /** It was retried or released: it comes again, and what follows it must wait for it. */
  notDone: boolean;
}

/**
 * Set on a delivery once a settlement was attempted (see settle): the pipeline's safety
 * net releases any delivery without it. A property of the delivery rather than a WeakSet
 * entry, which costs more per message and in every garbage collection.
 */
const SETTLED = Symbol('oncely.settled');
/**
 * Set on a delivery that stop() gave up on when its grace ran out: already logged and
 * counted (`ackFailed`), and its adapter is closed, so a settlement that comes later is
 * not sent (and not counted a second time).
 */
const ABANDONED = Symbol('oncely.abandoned');
type Marked = Delivery & { [SETTLED]?: true; [ABANDONED]?: true };

/** Thrown inside the transaction to roll back a claim whose attempts are used up. */
class AttemptsExhausted extends Error {}

/** Thrown inside the transaction when offsets mode finds the record already applied. */
class AlreadyApplied extends Error {}

/**
 * Thrown in place of a handler's outcome when the stop deadline aborted it: the message
 * did not fail, the consumer went away, so it is released and the attempt not counted.
 */
class ReleaseRequested extends Error {}

/** Probe interval while the store is down, growing to this cap. */
const OUTAGE_PROBE_MAX_MS = 2000;

/** How long a release waits for its run's count to be taken back before giving the message back anyway. */
const UNCOUNT_WAIT_MS = 1000;

/**
 * A running consumer: the one place that orders claim → run → commit → ack.
 *
 * Create it with `createConsumer(config)` (loads the adapter for `broker.type`) or an
 * adapter's typed factory such as `createSqsConsumer(options)`.
 *
 * @example
 * ```ts
 * const consumer = await createConsumer({ name: 'payments', broker: { type: 'memory', broker, queue: 'q' }, store, handler });
 * consumer.on('duplicate', (e) => console.log('skipped', e.messageId));
 * await consumer.start();
 * await consumer.stop();
 * ```
 */
export class Consumer<TBody = unknown, Tx = SqlClient> {
  private readonly settings: Settings<TBody, Tx>;
  private readonly store: IdempotencyStore<Tx>;
  private readonly log: Logger;
  private readonly emitter = new EventEmitter();
  private readonly telemetry: Telemetry;
  private state: State = 'created';
  private stopPromise: Promise<void> | undefined;
  private readonly stopping = new AbortController();
  private inFlight = 0;
  /** The lease keeper of every delivery in the pipeline, with that delivery (stop() aborts and reports them). */
  private readonly keepers = new Map<LeaseKeeper, Held>();
  /**
   * Take-backs of counted runs released during stop() that are still running after their
   * release went ahead without them (release() waits at most UNCOUNT_WAIT_MS): stop()
   * waits for them before it resolves.
   */
  private readonly takeBacks = new Set<Promise<void>>();
  private readonly waiters: Array<() => void> = [];
  /** Set while the store is down: fetching pauses until a probe succeeds. */
  private outage: Promise<void> | undefined;
  /**
   * Deliveries whose run was counted before it started (a possible redelivery, so a
   * crash must still count), with the run's token (see attemptNumber()): a release takes
   * the count back.
   */
  private readonly countedRuns = new WeakMap<Delivery, CountedRun>();
  /** Present with the `batch` option: collects prepared deliveries into one transaction. */
  private readonly batcher: Batcher<Prepared<TBody>> | undefined;

  constructor(
    config: ConsumerConfig<TBody, Tx>,
    private readonly adapter: BrokerAdapter,
  ) {
    validateConsumerConfig(config);
    this.settings = {
      ...CONSUMER_DEFAULTS,
      logger: stderrLogger,
      ...config,
      idStrategy: config.idStrategy ?? adapter.defaultIdStrategy,
    };
    this.store = config.store;
    if (this.settings.mode === 'offsets' && !this.store.offsets) {
      throw new ConfigError('mode', "is 'offsets' but the store keeps no offsets");
    }
    if (this.settings.payloadFingerprint && !this.store.fingerprints) {
      throw new ConfigError('payloadFingerprint', 'is set but the store keeps no payload fingerprints');
    }
    if (config.batch) {
      const { size, maxWaitMs = DEFAULT_BATCH_MAX_WAIT_MS } = config.batch;
      this.batcher = new Batcher(
        size,
        maxWaitMs,
        (batch) => this.runBatch(batch),
        (error) => this.log.error('unexpected batch pipeline error', { error }),
      );
    }
    this.log = toLogger(this.settings.logger);
    this.telemetry = new Telemetry(config.name, adapter.type, config.telemetry);
    // Unhandled 'error' events would crash the process; we never emit 'error'.
    this.emitter.setMaxListeners(0);
    // Every delivery waiting out a store outage listens here until its wait ends (stop()
    // must end it), so up to `concurrency` of them at once, besides the adapter's own few.
    // Past Node's default of 10 it warned of a leak during every outage at concurrency > 10.
    setMaxListeners(this.settings.concurrency + 10, this.stopping.signal);
  }

  /** Consumer name (the namespace of processed IDs). */
  get name(): string {
    return this.settings.name;
  }

  /** Handlers (and held deliveries) in flight right now. */
  get inFlightCount(): number {
    return this.inFlight;
  }

  /** Subscribes to a consumer event. */
  on(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): this {
    this.emitter.on(event, listener);
    return this;
  }

  off(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): this {
    this.emitter.off(event, listener);
    return this;
  }

  /**
   * Starts fetching. Rejects when the store does not answer (or its schema is not
   * migrated), or the adapter cannot connect or finds the broker misconfigured.
   */
  async start(): Promise<void> {
    if (this.state !== 'created') throw new ConsumerStateError(`start() called on a ${this.state} consumer`);
    this.state = 'running';
    try {
      // Fail fast on a store that cannot work (unreachable, schema not migrated) rather
      // than start fetching messages that could only be held and released.
      await this.store.ping();
      await this.adapter.start(this.runtime()).catch((error: unknown) => {
        // The client's own error (ECONNREFUSED, ENOTFOUND...) says neither broker nor address.
        throw isOncelyError(error)
          ? error
          : new BrokerConnectionError(this.adapter.type, this.adapter.address, { cause: error });
      });
    } catch (error) {
      this.state = 'stopped';
      this.stopping.abort();
      await this.adapter.close().catch(() => {});
      throw error;
    }
  }

  /**
   * Stops fetching, lets in-flight handlers finish and settle, releases prefetched
   * messages that never started, and closes the adapter. After `stopTimeoutMs` the
   * handlers' `ctx.signal` aborts; their transactions roll back unless already committed,
   * and their messages are released. Resolves once every delivery has settled (its
   * rollback, the take-back of its run's count and its release), or when `stopGraceMs`
   * more has passed; only then is the adapter closed, so the store may be closed once
   * this resolves. A delivery still unsettled at the end of the grace is logged with its
   * message ID and counted as `ackFailed`: the broker hands it out again after its lease.
   */
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
    this.state = 'stopping';
    this.stopping.abort();
    this.wakeWaiters();
    await this.adapter.stop().catch((error) => this.log.warn('adapter stop failed', { error }));
    this.batcher?.drain();
    if (!(await this.drained(this.settings.stopTimeoutMs))) {
      this.log.warn('stop deadline passed with handlers in flight: aborting their signals', {
        inFlight: this.inFlight,
      });
      for (const keeper of this.keepers.keys())
        keeper.abort(new OncelyError('SHUTDOWN', 'consumer stop deadline passed'));
    }
    // The aborted runs still roll back, take back their counts and release their messages,
    // through the store and the adapter: both stay open until every one has settled. Its
    // own bound, not stopTimeoutMs: a short stop deadline must not cut a release short,
    // which would leave the message invisible until its lease lapses.
    const graceEnds = Date.now() + this.settings.stopGraceMs;
    if (!(await this.drained(this.settings.stopGraceMs))) this.abandonUnsettled();
    await settledWithin(
      Promise.all(this.takeBacks).then(() => {}),
      Math.max(0, graceEnds - Date.now()),
    );
    await this.adapter.close().catch((error) => this.log.warn('adapter close failed', { error }));
    this.state = 'stopped';
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
        `stopGraceMs (${this.settings.stopGraceMs} ms) passed before this delivery was settled: the adapter closes, and the broker redelivers the message after its lease`,
      );
      this.log.error('stop grace passed with a delivery unsettled: it returns after its lease', {
        ...event,
        error,
      });
      this.emit('ackFailed', { ...event, error });
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

  // ------------------------------------------------------------------------------------
  // The adapter's view
  // ------------------------------------------------------------------------------------

  private runtime(): AdapterRuntime {
    return {
      consumerName: this.settings.name,
      concurrency: this.settings.concurrency,
      mode: this.settings.mode,
      store: this.store,
      log: this.log,
      stopping: this.stopping.signal,
      whenReady: () => this.whenReady(),
      dispatch: (delivery) => this.dispatch(delivery),
      batchSize: this.settings.batch?.size,
      dispatchInOrder: (deliveries) => this.dispatchInOrder(deliveries),
      reportError: (error, context) => this.log.warn(`broker: ${context}`, { error }),
    };
  }

  private async whenReady(): Promise<number> {
    for (;;) {
      if (this.state !== 'running') return 0;
      if (this.outage) {
        await Promise.race([this.outage, this.nextWake()]);
        continue;
      }
      const free = this.settings.concurrency - this.inFlight;
      if (free > 0) return free;
      await this.nextWake();
    }
  }

  private nextWake(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private wakeWaiters(): void {
    // Runs after every delivery: no copy of an empty list.
    if (this.waiters.length === 0) return;
    for (const wake of this.waiters.splice(0)) wake();
  }

  private async dispatch(delivery: Delivery, slot?: Slot<TBody>): Promise<void> {
    if (this.state !== 'running') {
      slot?.gathering.skip(slot.index, true);
      // Prefetched after stop() began: give it back now rather than let its lease run out.
      // Counted in flight, so stop() closes the adapter only after this release.
      this.inFlight++;
      try {
        await this.release(delivery, { consumer: this.settings.name, messageId: this.idForLogs(delivery) });
      } finally {
        this.inFlight--;
        this.wakeWaiters();
      }
      return;
    }
    this.inFlight++;
    try {
      // Without tracing, no span and no closure for one.
      if (this.telemetry.tracing())
        await this.telemetry.aroundDelivery(delivery, () => this.handleDelivery(delivery, slot));
      else await this.handleDelivery(delivery, slot);
    } catch (error) {
      // handleDelivery settles everything itself; reaching here is a bug, never a lost message
      // (the unsettled delivery returns when its lease lapses).
      this.log.error('unexpected pipeline error', { error });
    } finally {
      // Settled before it joined its ordered batch: dead-lettered (no ID, poison), the batch
      // runs without it; retried or released, the batch stops before it.
      slot?.gathering.skip(slot.index, slot.notDone);
      this.inFlight--;
      this.wakeWaiters();
    }
  }

  /** The delivery's message ID for events and logs; undefined when it has none (or the ID function threw). */
  private idForLogs(delivery: Delivery): string | undefined {
    try {
      return resolveMessageId(this.settings.idStrategy, delivery.envelope);
    } catch {
      return undefined;
    }
  }

  /**
   * Deliveries that must take effect in order (one Kafka partition's records) as one
   * batch, in their order whatever order they finish preparing in: one transaction, and
   * what follows a failed one in its ordering group is released (processBatchOnce).
   */
  private async dispatchInOrder(deliveries: readonly Delivery[]): Promise<void> {
    const gathering = new Gathering<Prepared<TBody>>(
      deliveries.length,
      async (batch, heldBack) => {
        // Behind one that comes again: given back, not run ahead of it (nor counted).
        for (const entry of heldBack) await this.release(entry.delivery, entry.event);
        if (batch.length > 0) await this.runBatch(batch);
      },
      (error) => this.log.error('unexpected batch pipeline error', { error }),
    );
    await Promise.all(
      deliveries.map((delivery, index) => {
        const slot: Slot<TBody> = { gathering, index, notDone: false };
        return this.dispatch(notingNotDone(delivery, slot), slot);
      }),
    );
  }

  // ------------------------------------------------------------------------------------
  // The pipeline for one delivery
  // ------------------------------------------------------------------------------------

  private async handleDelivery(delivery: Delivery, slot?: Slot<TBody>): Promise<void> {
    const messageId = resolveMessageId(this.settings.idStrategy, delivery.envelope);
    this.telemetry.identified(delivery, messageId);
    const base: ConsumerEvent = { consumer: this.settings.name, messageId };
    const key: MessageKey | undefined = messageId ? { consumer: this.settings.name, messageId } : undefined;
    const leased = this.settings.mode === 'leased';
    /** Leased mode: the DB claim this delivery holds, renewed by the keeper until completed. */
    let ownerOfClaim: string | undefined;
    const keeper = new LeaseKeeper({
      delivery,
      brokerLease: this.adapter.lease,
      renewBroker: this.settings.leaseRenewal,
      handlerTimeoutMs: this.settings.handlerTimeoutMs,
      claimMs: leased ? this.settings.leaseMs : undefined,
      renewClaim: leased
        ? async () => !ownerOfClaim || !key || this.store.renewLease(key, ownerOfClaim, this.settings.leaseMs)
        : undefined,
      onRenewed: () => this.emit('leaseRenewed', base),
      onLost: (error) => this.emit('leaseLost', { ...base, error }),
      onRenewError: (error) => this.log.warn('lease renewal failed; retrying', { ...base, error }),
    });
    const held: Held = { delivery, keeper, event: base };
    this.keepers.set(keeper, held);
    keeper.start();
    try {
      this.emit('received', base);
      const prepared = await this.prepare(held, key);
      if (!prepared) return;
      if (slot) {
        await slot.gathering.add(slot.index, prepared);
        return;
      }
      if (this.batcher) {
        delivery.awaitingBatch?.();
        await this.batcher.add(prepared);
        return;
      }
      if (leased) {
        await this.runLeased(prepared, (owner) => {
          ownerOfClaim = owner;
          if (owner) keeper.claimAcquired();
        });
        return;
      }
      await this.runOne(prepared);
    } finally {
      keeper.stop();
      this.keepers.delete(keeper);
      // The safety net: every path above settles the delivery; one that did not (a bug, or
      // a batch that failed in an unforeseen way) gives it back now rather than leave it
      // stranded until its lease lapses. A release is never counted as an attempt.
      if (!(delivery as Marked)[SETTLED]) {
        this.log.error('delivery left unsettled by the pipeline: releasing it', { ...base });
        await this.release(delivery, base);
      }
    }
  }

  /** `transactional` and `offsets` modes, one delivery: its own transaction, then its settlement. */
  private async runOne(prepared: Prepared<TBody>): Promise<Outcome | undefined> {
    const started = Date.now();
    const outcome = await this.withStore([prepared], prepared.event, () => this.runTransactional(prepared));
    if (outcome === undefined) return undefined;
    const { consumer, messageId, attempt } = prepared.event;
    await this.conclude(outcome, prepared.delivery, {
      consumer,
      messageId,
      attempt,
      durationMs: Date.now() - started,
    });
    return outcome;
  }

  /**
   * Resolves the ID, decodes the body (dead-lettering poison) and finds the attempt
   * number. Returns undefined when the delivery was settled here.
   */
  private async prepare(held: Held, key: MessageKey | undefined): Promise<Prepared<TBody> | undefined> {
    const { delivery, event } = held;
    const { envelope } = delivery;
    if (!key) {
      const detail = `message has no ID under ${describeIdStrategy(this.settings.idStrategy)}`;
      await this.deadLetter(delivery, 'missing-id', detail, event);
      return undefined;
    }
    let body: unknown;
    try {
      body = decodeBody(this.settings.bodyFormat, envelope.body);
    } catch (error) {
      await this.deadLetter(delivery, 'invalid-body', `body does not decode: ${errorText(error)}`, event);
      return undefined;
    }
    const attempt = await this.withStore([held], event, () => this.attemptNumber(delivery, key));
    if (attempt === undefined) return undefined;
    const message: Message<TBody> = {
      id: key.messageId,
      body: body as TBody,
      attributes: envelope.attributes,
      deliveryAttempt: attempt,
      redelivered: envelope.redelivered,
      orderingKey: envelope.orderingKey,
      sequence: envelope.sequence,
      source: envelope.source,
      broker: this.adapter.type,
      raw: envelope.raw,
    };
    // Spelled out rather than spread: this runs for every delivery, and spreads of these
    // objects are several times slower than the literal.
    const prepared: Prepared<TBody> = {
      delivery,
      keeper: held.keeper,
      key,
      attempt,
      message,
      event: { consumer: event.consumer, messageId: event.messageId, attempt },
    };
    try {
      prepared.fingerprint = fingerprintDelivery(this.settings.payloadFingerprint, envelope, message);
    } catch (error) {
      // The user's fingerprint function threw: a failed attempt like a handler's throw.
      await this.conclude({ kind: 'failed', error }, delivery, prepared.event);
      return undefined;
    }
    return prepared;
  }

  /**
   * The batch fast path: one transaction and one claim for the whole batch, each
   * handler under its own savepoint, every delivery settled after the one commit.
   */
  private async runBatch(batch: readonly Prepared<TBody>[]): Promise<void> {
    const started = Date.now();
    let outcomes: Outcome[] | undefined;
    try {
      outcomes = await this.withStore(batch, { consumer: this.settings.name }, () =>
        this.batchOutcomes(batch),
      );
    } catch (error) {
      // The batch failed as a whole, not one item in it: its COMMIT was refused (a deferred
      // constraint), transient conflicts outlasted their retries, an unclaim failed. Nothing
      // committed. Each message then runs in a transaction of its own, so only the one at
      // fault fails and its healthy neighbours are neither stranded nor dead-lettered.
      this.log.warn('batch transaction failed as a whole: running its messages one by one', { error });
      await this.runOneByOne(batch);
      return;
    }
    if (outcomes === undefined) return;
    const durationMs = Date.now() - started;
    await Promise.all(
      batch.map((entry, i) => this.conclude(outcomes[i]!, entry.delivery, { ...entry.event, durationMs })),
    );
  }

  /**
   * A batch's messages, each in its own transaction, in order. An ordered one behind a
   * message of its group that did not go through is released, as in one transaction.
   */
  private async runOneByOne(batch: readonly Prepared<TBody>[]): Promise<void> {
    const stalled = new Set<string>();
    for (const entry of batch) {
      const group = orderingGroupOf(entry.delivery.envelope);
      if (group !== undefined && stalled.has(group)) {
        await this.release(entry.delivery, entry.event);
        continue;
      }
      const outcome = await this.runOne(entry);
      const wentThrough = outcome !== undefined && !['failed', 'release', 'busy'].includes(outcome.kind);
      if (group !== undefined && !wentThrough) stalled.add(group);
    }
  }

  private async batchOutcomes(batch: readonly Prepared<TBody>[]): Promise<Outcome[]> {
    const results: ReadonlyArray<BatchItemResult<unknown> | OrderedBatchItemResult<unknown>> = this.settings
      .batchHandler
      ? await this.runTogether(batch)
      : await processBatchOnce(
          this.store,
          this.settings.name,
          batch.map((entry) => ({
            ...batchMessage(entry),
            work: (tx: Tx) =>
              // The batch runs in whichever delivery's context filled it: each handler gets its own span.
              this.telemetry.within(entry.delivery, async () => {
                if (entry.attempt > this.settings.maxAttempts) throw new AttemptsExhausted();
                await this.runHandler(entry.message, tx, entry.attempt, entry.keeper);
              }),
          })),
        );
    return results.map((result): Outcome => {
      if (result.status === 'duplicate' && result.payloadMismatch)
        return { kind: 'mismatch', mismatch: result.payloadMismatch };
      // Behind a failure in its ordering group: given back, not counted as an attempt.
      if (result.status === 'released') return { kind: 'release' };
      if (result.status !== 'failed') return { kind: result.status };
      if (result.error instanceof AttemptsExhausted) return { kind: 'exhausted' };
      if (result.error instanceof ReleaseRequested) return { kind: 'release' };
      return { kind: 'failed', error: result.error };
    });
  }

  /**
   * `batchHandler`: one call for the batch's new messages. A message whose attempts are
   * used up fails the joint call before it runs; the isolation pass then finds it alone
   * (`exhausted`), exactly as on the per-message path, and commits the others.
   */
  private runTogether(batch: readonly Prepared<TBody>[]): Promise<OrderedBatchItemResult<void>[]> {
    return processBatchTogether(
      this.store,
      this.settings.name,
      batch.map((entry) => ({ ...batchMessage(entry), entry })),
      async (fresh, tx) => {
        const entries = fresh.map((item) => item.entry);
        if (entries.some((entry) => entry.attempt > this.settings.maxAttempts)) throw new AttemptsExhausted();
        // One message alone runs in its own span; a joint call in whichever delivery's
        // context filled the batch.
        if (entries.length === 1) {
          await this.telemetry.within(entries[0]!.delivery, () => this.runBatchHandler(entries, tx));
        } else {
          await this.runBatchHandler(entries, tx);
        }
      },
    );
  }

  /**
   * The attempt this run is: failed runs so far (and runs that crashed the process) plus
   * one. Attempts count failures, not deliveries: a broker's delivery count also counts
   * releases (stop, outage, a prefetched or held-back delivery that never ran), so it only
   * tells whether this may be a redelivery.
   *
   * - A first delivery writes nothing (the happy path pays for the marker alone). If it
   *   fails, the failure is counted when it is settled; if it crashes the process, the
   *   crash is not counted (the next delivery's count starts there).
   * - A possible redelivery counts its run up front, in its own commit, so that a message
   *   that crashes the process every time still reaches `maxAttempts`. If the run ends in
   *   a release instead, the count is taken back.
   */
  private async attemptNumber(delivery: Delivery, key: MessageKey): Promise<number> {
    if (isFirstDelivery(delivery.envelope)) return 1;
    // One token per run, on record before the count is sent: when the count's answer is
    // lost and this runs again after the outage, the store counts the run once; when the
    // run is released instead (the outage outlasted its hold), the take-back removes this
    // run's count only if it landed.
    let counted = this.countedRuns.get(delivery);
    if (!counted) {
      counted = { key, run: randomUUID() };
      this.countedRuns.set(delivery, counted);
    }
    return this.countRun(counted);
  }

  /** One more run on record (its own short commit); returns the new count. */
  private countRun({ key, run }: CountedRun): Promise<number> {
    return retryTransient(this.store, () => this.store.recordAttempt(key, run));
  }

  /** A failed run of a first delivery: counted now (a redelivery's run was counted up front). */
  private async countFailure(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    if (this.countedRuns.has(delivery) || event.messageId === undefined) return;
    const key = { consumer: event.consumer, messageId: event.messageId };
    await this.countRun({ key, run: randomUUID() }).catch((error) =>
      this.log.warn('could not count a failed attempt', { ...event, error }),
    );
  }

  /** A counted run that did not fail (released, or backed off from a busy claim): uncount it. */
  private async uncount(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    const counted = this.countedRuns.get(delivery);
    if (!counted) return;
    this.countedRuns.delete(delivery);
    try {
      await this.store.forgetAttempt(counted.key, counted.run);
    } catch (error) {
      this.log.warn('could not take back the count of a released run', { ...event, error });
    }
  }

  /**
   * A counted run whose message is done (its marker committed, by this run or an earlier
   * one): the counter row has no further use, and keeping it would leave a row behind for
   * every redelivery that succeeded (on Kafka, the first record of each partition after
   * every rebalance). After the ack, so it never delays a settlement; a row this cannot
   * delete stays until retention prunes it.
   */
  private async clearCount(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    const counted = this.countedRuns.get(delivery);
    if (!counted || !this.store.clearAttempts) return;
    this.countedRuns.delete(delivery);
    try {
      await this.store.clearAttempts(counted.key);
    } catch (error) {
      this.log.debug('could not delete the attempt count of a processed message', { ...event, error });
    }
  }

  /** `transactional` and `offsets` modes: marker (or offset) and effect in one transaction. */
  private async runTransactional({
    message,
    key,
    attempt,
    keeper,
    delivery,
    fingerprint,
  }: Prepared<TBody>): Promise<Outcome> {
    const offset = delivery.envelope.offset;
    try {
      if (this.settings.mode === 'offsets' && !offset) {
        throw new OncelyError(
          'CONFIG_INVALID',
          `mode 'offsets' needs a broker with ordered offsets (Kafka), not '${this.adapter.type}'`,
        );
      }
      return await retryTransient(this.store, () =>
        this.store.transaction(async (tx): Promise<Outcome> => {
          if (offset && this.settings.mode === 'offsets') {
            const advanced = await this.store.offsets!.advance(
              tx,
              key.consumer,
              offset.topic,
              offset.partition,
              offset.offset,
            );
            if (!advanced) throw new AlreadyApplied();
          } else if (fingerprint !== undefined) {
            const claimed = await fingerprintStore(this.store).claim(
              tx,
              key.consumer,
              new Map([[key.messageId, fingerprint]]),
            );
            if (!claimed.has(key.messageId)) return this.compareFingerprint(key, fingerprint, tx);
          } else {
            const claimed = await this.store.claim(tx, key.consumer, [key.messageId]);
            if (!claimed.has(key.messageId)) return { kind: 'duplicate' };
          }
          // Claimed, so earlier attempts did not commit. Past the limit, earlier attempts
          // crashed the process: roll back and dead-letter instead of crashing again.
          if (attempt > this.settings.maxAttempts) throw new AttemptsExhausted();
          await this.runHandler(message, tx, attempt, keeper);
          return { kind: 'processed' };
        }),
      );
    } catch (error) {
      if (error instanceof AlreadyApplied) return { kind: 'duplicate' };
      if (error instanceof AttemptsExhausted) return { kind: 'exhausted' };
      if (error instanceof ReleaseRequested) return { kind: 'release' };
      if (this.store.classifyError(error) === 'unavailable') throw error;
      return { kind: 'failed', error };
    }
  }

  /**
   * `leased` mode: claim in its own commit, run outside any transaction, complete if still
   * owner. Each store step waits out an outage on its own, so an outage during the
   * completion retries the completion (same owner) instead of running the handler again.
   */
  private async runLeased(
    prepared: Prepared<TBody>,
    setOwner: (owner: string | undefined) => void,
  ): Promise<void> {
    const { message, key, attempt, keeper, event, delivery } = prepared;
    const started = Date.now();
    const finish = (outcome: Outcome) =>
      this.conclude(outcome, delivery, { ...event, durationMs: Date.now() - started });
    const acquired = await this.withStore([prepared], event, () =>
      this.leasedStep(() =>
        retryTransient(this.store, () => this.store.acquireLease(key, this.settings.leaseMs)),
      ),
    );
    if (acquired === undefined) return;
    if ('refused' in acquired) return finish(acquired.refused);
    const claim = acquired.value;
    if (claim.status === 'completed') {
      const { fingerprint } = prepared;
      if (fingerprint === undefined) return finish({ kind: 'duplicate' });
      const compared = await this.withStore([prepared], event, () =>
        this.leasedStep(() => retryTransient(this.store, () => this.compareFingerprint(key, fingerprint))),
      );
      if (compared === undefined) return;
      return finish('refused' in compared ? compared.refused : compared.value);
    }
    if (claim.status === 'busy') {
      // Someone holds a live claim: do not ack; come back once it could have expired.
      return finish({ kind: 'busy', retryInMs: Math.max(100, claim.lockedUntil.getTime() - Date.now()) });
    }
    setOwner(claim.owner);
    try {
      if (claim.takeover) this.emit('takeover', event);
      const giveUp = () =>
        this.store
          .releaseLease(key, claim.owner)
          .catch((error) => this.log.warn('could not release leased claim', { ...event, error }));
      if (attempt > this.settings.maxAttempts) {
        await giveUp();
        return finish({ kind: 'exhausted' });
      }
      let result: unknown;
      try {
        result = await this.runHandler(message, undefined, attempt, keeper);
      } catch (error) {
        await giveUp();
        return finish(error instanceof ReleaseRequested ? { kind: 'release' } : { kind: 'failed', error });
      }
      const { fingerprint } = prepared;
      const completed = await this.withStore([prepared], event, () =>
        this.leasedStep(() =>
          fingerprint === undefined
            ? this.store.completeLease(key, claim.owner, result ?? null)
            : fingerprintStore(this.store).completeLease(key, claim.owner, result ?? null, fingerprint),
        ),
      );
      if (completed === undefined) return;
      if ('refused' in completed) {
        // The store refused the completion itself (a result jsonb cannot hold): a failure
        // like any other, counted, so it ends in the dead-letter queue instead of a loop.
        await giveUp();
        return finish(completed.refused);
      }
      if (!completed.value) {
        // Our claim expired and another consumer took over: it owns the outcome now.
        this.emit('leaseLost', { ...event, error: new LeaseLostError('claim taken over before completion') });
        return finish({ kind: 'duplicate' });
      }
      return finish({ kind: 'processed' });
    } finally {
      setOwner(undefined);
    }
  }

  /**
   * A leased-mode store step: an outage propagates (withStore waits it out); any other
   * store error becomes a `failed` outcome, so the delivery is settled and counted.
   */
  private async leasedStep<T>(step: () => Promise<T>): Promise<{ value: T } | { refused: Outcome }> {
    try {
      return { value: await step() };
    } catch (error) {
      if (this.store.classifyError(error) === 'unavailable') throw error;
      return { refused: { kind: 'failed', error } };
    }
  }

  /**
   * A duplicate under `payloadFingerprint`: a mismatch when the marker holds another
   * fingerprint. A marker written without one (before the option was on) is a duplicate.
   */
  private async compareFingerprint(key: MessageKey, fingerprint: string, tx?: Tx): Promise<Outcome> {
    const stored = (await fingerprintStore(this.store).read(key.consumer, [key.messageId], tx)).get(
      key.messageId,
    );
    if (stored === undefined || stored === fingerprint) return { kind: 'duplicate' };
    return { kind: 'mismatch', mismatch: { storedFingerprint: stored, fingerprint } };
  }

  private async runHandler(
    message: Message<TBody>,
    tx: Tx | undefined,
    attempt: number,
    keeper: LeaseKeeper,
  ): Promise<unknown> {
    const { handler, batchHandler } = this.settings;
    // With batchHandler, a message that runs on its own (a batch's isolation pass, the
    // one-by-one fallback) is a batch of one.
    if (batchHandler) return this.runBatchHandler([{ message, attempt, keeper }], tx as Tx);
    // The stop deadline passed while this delivery was being prepared: the core already
    // gave it up, so its handler does not start (with its signal already aborted, a
    // handler waiting for the 'abort' event would never end).
    if (isShutdown(keeper)) throw new ReleaseRequested();
    const ctx = this.context(message, tx, attempt, keeper);
    keeper.startHandlerClock();
    let result: unknown;
    try {
      result = await handler!(message, ctx);
    } catch (error) {
      // Whatever the handler threw once the stop deadline aborted it (often the abort
      // itself), the message did not fail: the consumer is going away.
      if (isShutdown(keeper)) throw new ReleaseRequested();
      throw error;
    } finally {
      keeper.stopHandlerClock();
    }
    mayCommit(keeper);
    return result;
  }

  /** `batchHandler` over `entries`, in one transaction: runHandler's rules for each of them. */
  private async runBatchHandler(
    entries: ReadonlyArray<Pick<Prepared<TBody>, 'message' | 'attempt' | 'keeper'>>,
    tx: Tx,
  ): Promise<void> {
    // As in runHandler: nothing starts once the stop deadline has passed.
    if (entries.some(({ keeper }) => isShutdown(keeper))) throw new ReleaseRequested();
    const batch = entries.map(({ message, attempt, keeper }) => ({
      message,
      ctx: this.context(message, tx, attempt, keeper),
    }));
    for (const { keeper } of entries) keeper.startHandlerClock();
    try {
      await this.settings.batchHandler!(batch, tx);
    } catch (error) {
      if (entries.some(({ keeper }) => isShutdown(keeper))) throw new ReleaseRequested();
      throw error;
    } finally {
      for (const { keeper } of entries) keeper.stopHandlerClock();
    }
    // One message that may not commit fails the joint call: the isolation pass then
    // commits the others and settles that one alone.
    for (const { keeper } of entries) mayCommit(keeper);
  }

  private context(message: Message<TBody>, tx: Tx | undefined, attempt: number, keeper: LeaseKeeper) {
    return new MessageContext(this.settings.name, message.id, tx, attempt, keeper, this.store, this.log);
  }

  private async conclude(outcome: Outcome, delivery: Delivery, event: ConsumerEvent): Promise<void> {
    this.telemetry.outcome(
      delivery,
      outcome.kind,
      event,
      outcome.kind === 'failed' ? outcome.error : undefined,
    );
    switch (outcome.kind) {
      case 'processed':
        this.emit('processed', event);
        await this.settle('ack', delivery, () => delivery.ack(), event);
        await this.clearCount(delivery, event);
        return;
      case 'duplicate':
        this.emit('duplicate', event);
        await this.settle('ack', delivery, () => delivery.ack(), event);
        await this.clearCount(delivery, event);
        return;
      case 'mismatch': {
        const mismatchEvent = { ...event, payloadMismatch: outcome.mismatch };
        this.emit('payloadMismatch', mismatchEvent);
        if (this.settings.onPayloadMismatch === 'dead-letter') {
          const detail =
            `message ID already processed with another payload (stored ${outcome.mismatch.storedFingerprint}, ` +
            `received ${outcome.mismatch.fingerprint})`;
          await this.deadLetter(delivery, 'payload-mismatch', detail, mismatchEvent);
          return;
        }
        // 'skip': the first payload's effect stands; this copy is acked as the duplicate it is.
        this.log.warn('duplicate message ID with a different payload: skipped', mismatchEvent);
        this.emit('duplicate', mismatchEvent);
        await this.settle('ack', delivery, () => delivery.ack(), mismatchEvent);
        await this.clearCount(delivery, mismatchEvent);
        return;
      }
      case 'busy':
        await this.uncount(delivery, event);
        await this.retry(delivery, outcome.retryInMs, event);
        return;
      case 'release':
        await this.release(delivery, event);
        return;
      case 'exhausted':
        await this.deadLetter(
          delivery,
          'max-attempts',
          `attempt ${event.attempt} exceeds maxAttempts ${this.settings.maxAttempts}: earlier runs failed or crashed the process`,
          event,
        );
        return;
      case 'failed': {
        this.emit('failed', { ...event, error: outcome.error });
        await this.countFailure(delivery, event);
        const attempt = event.attempt ?? 1;
        if (attempt >= this.settings.maxAttempts) {
          const detail = `failed ${attempt} times; last error: ${errorText(outcome.error)}`;
          await this.deadLetter(delivery, 'max-attempts', detail, event);
        } else {
          await this.retry(delivery, retryDelayMs(attempt, this.settings.backoff), event);
        }
        return;
      }
    }
  }

  /** Gives a delivery back without it counting as an attempt (stop, outage, safety net). */
  private async release(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    // The count first: a message given back can be redelivered at once, and a run counted
    // before the take-back landed would see one attempt too many (at the limit, dead-lettered
    // a run early). Bounded: a release often happens because the store is down or
    // partitioned, and giving the message back must not wait for it. A count that cannot be
    // taken back costs the message one attempt, logged.
    const takeBack = this.uncount(delivery, event);
    // A release of stop()'s (its deadline, or a prefetched delivery) is part of the stop:
    // stop() waits for its take-back too. One from before (a store outage) is not: that
    // store may not answer for a long time, and the count costs one attempt at most.
    if (this.state === 'stopping') {
      this.takeBacks.add(takeBack);
      void takeBack.finally(() => this.takeBacks.delete(takeBack));
    }
    await settledWithin(takeBack, UNCOUNT_WAIT_MS);
    if (await this.settle('release', delivery, () => delivery.release(), event)) this.emit('released', event);
  }

  private async retry(delivery: Delivery, delayMs: number, event: ConsumerEvent): Promise<void> {
    if (
      await this.settle(
        'retry',
        delivery,
        () => delivery.retryLater(delayMs, { attempt: event.attempt }),
        event,
      )
    ) {
      this.emit('retried', { ...event, delayMs });
    }
  }

  private async deadLetter(
    delivery: Delivery,
    reason: DeadLetterReason,
    detail: string,
    event: ConsumerEvent,
  ): Promise<void> {
    this.log.warn('dead-lettering message', { ...event, reason, detail });
    if (
      await this.settle(
        'dead-letter',
        delivery,
        () => delivery.deadLetter(reason, detail, { attempt: event.attempt }),
        { ...event, reason },
      )
    ) {
      this.emit('deadLettered', { ...event, reason });
    }
  }

  /**
   * Runs one settlement. A failure after the commit is logged and counted (`ackFailed`),
   * never retried into a second effect: the redelivery it causes meets the marker.
   */
  private async settle(
    what: string,
    delivery: Delivery,
    action: () => Promise<void>,
    event: ConsumerEvent,
  ): Promise<boolean> {
    // Recorded before the call: a settlement that fails is logged and counted, and the
    // broker redelivers; releasing it on top would only add noise.
    (delivery as Marked)[SETTLED] = true;
    // stop() gave up on it and closed the adapter: logged and counted then.
    if ((delivery as Marked)[ABANDONED]) return false;
    try {
      await action();
      this.telemetry.settled(delivery, what, event);
      return true;
    } catch (error) {
      this.telemetry.settled(delivery, what, event, error);
      // Sent before stop() gave up on it, failed after: counted once, then.
      if ((delivery as Marked)[ABANDONED]) return false;
      this.log.warn(`${what} failed`, { ...event, error });
      this.emit('ackFailed', { ...event, error });
      return false;
    }
  }

  // ------------------------------------------------------------------------------------
  // Store outage: fail closed
  // ------------------------------------------------------------------------------------

  /**
   * Runs a store step for held deliveries. When the store is unavailable, fetching
   * pauses, the deliveries are held (their leases kept) and the step re-run once the
   * store answers; after `outageHoldMs` (or when a lease is lost) they are released to
   * the broker. Returns undefined when they were released.
   */
  private withStore<T>(
    held: readonly Held[],
    event: ConsumerEvent,
    step: () => Promise<T>,
  ): Promise<T | undefined> {
    const holdUntil = Date.now() + this.settings.outageHoldMs;
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
      if (this.store.classifyError(error) !== 'unavailable') throw error;
      this.enterOutage(error, event);
      const leases = AbortSignal.any(held.map((h) => h.keeper.signal));
      if (!(await this.waitForStore(holdUntil, leases))) {
        for (const { delivery, event: heldEvent } of held) await this.release(delivery, heldEvent);
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
    this.emit('storeUnavailable', { ...event, error });
    this.log.error('store unavailable: pausing fetching until it answers', { error });
    void this.adapter
      .pause?.()
      .catch((pauseError) => this.log.warn('adapter pause failed', { error: pauseError }));
    this.outage = this.probeUntilBack().then((recovered) => {
      this.outage = undefined;
      if (recovered) {
        this.emit('storeRecovered', { consumer: this.settings.name });
        this.log.warn('store answers again: resuming');
        void this.adapter
          .resume?.()
          .catch((resumeError) => this.log.warn('adapter resume failed', { error: resumeError }));
      }
      this.wakeWaiters();
    });
  }

  /** Pings until the store answers (true) or the consumer stops (false). */
  private async probeUntilBack(): Promise<boolean> {
    for (let delay = 100; ; delay = Math.min(OUTAGE_PROBE_MAX_MS, delay * 2)) {
      await sleep(delay);
      if (this.state !== 'running') return false;
      try {
        await this.store.ping();
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
    if (remaining <= 0 || leaseSignal.aborted || this.stopping.signal.aborted) return false;
    let giveUp!: () => void;
    const gaveUp = new Promise<false>((resolve) => {
      giveUp = () => resolve(false);
    });
    const timer = setTimeout(giveUp, remaining);
    // Removed again below: the consumer's stopping signal lives as long as the consumer.
    leaseSignal.addEventListener('abort', giveUp, { once: true });
    this.stopping.signal.addEventListener('abort', giveUp, { once: true });
    try {
      return await Promise.race([outage.then(() => true as const), gaveUp]);
    } finally {
      clearTimeout(timer);
      leaseSignal.removeEventListener('abort', giveUp);
      this.stopping.signal.removeEventListener('abort', giveUp);
    }
  }

  private emit(name: ConsumerEventName, event: ConsumerEvent): void {
    this.telemetry.record(name, event);
    try {
      this.emitter.emit(name, event);
    } catch (error) {
      // A throwing listener must not derail the pipeline.
      this.log.warn(`'${name}' listener threw`, { error });
    }
  }
}

/**
 * A handler's `ctx`. A class, with `tx`, `signal` and `log` as getters on its prototype:
 * an object literal with getters is built through V8's runtime, about half a µs per
 * getter per message, where a class instance takes a few nanoseconds. The methods stay
 * own closures, so a handler may destructure them (`const { publish } = ctx`); a spread
 * (`{ ...ctx }`) copies own properties only, so it carries the methods and `attempt`.
 */
class MessageContext<Tx> implements HandlerContext<Tx> {
  readonly idempotencyKey: (step: string) => string;
  readonly savepoint: <T>(work: () => Promise<T>) => Promise<T>;
  readonly publish: (destination: string, body: unknown, options?: PublishOptions) => Promise<string>;
  readonly attempt: number;
  readonly #tx: Tx | undefined;
  readonly #keeper: LeaseKeeper;
  readonly #consumerLog: Logger;
  readonly #consumer: string;
  readonly #messageId: string;
  /** Built when first read: most handlers never log. */
  #log: Logger | undefined;

  constructor(
    consumer: string,
    messageId: string,
    tx: Tx | undefined,
    attempt: number,
    keeper: LeaseKeeper,
    store: IdempotencyStore<Tx>,
    consumerLog: Logger,
  ) {
    this.attempt = attempt;
    this.#tx = tx;
    this.#keeper = keeper;
    this.#consumerLog = consumerLog;
    this.#consumer = consumer;
    this.#messageId = messageId;
    this.idempotencyKey = (step) => `${consumer}:${messageId}:${step}`;
    this.savepoint = (work) => {
      if (tx === undefined) {
        throw new OncelyError('CONSUMER_STATE', "ctx.savepoint is not available in 'leased' mode");
      }
      return store.savepoint(tx, work);
    };
    // Counts this run's publishes: a re-run starts again at 1 and writes the same IDs.
    let published = 0;
    this.publish = async (destination, body, options) => {
      if (tx === undefined) {
        throw new OncelyError(
          'CONSUMER_STATE',
          "ctx.publish is not available in 'leased' mode: no transaction covers the handler, so the message could not commit with its effect",
        );
      }
      const row = toOutboxWrite(destination, body, options, () => `${consumer}:${messageId}:${++published}`);
      await outboxOf(store).write(tx, row);
      return row.id;
    };
  }

  get tx(): Tx {
    if (this.#tx === undefined) {
      throw new OncelyError(
        'CONSUMER_STATE',
        "ctx.tx is not available in 'leased' mode: the handler runs outside a transaction",
      );
    }
    return this.#tx;
  }

  /** The keeper creates its AbortSignal only for a handler that reads it. */
  get signal(): AbortSignal {
    return this.#keeper.signal;
  }

  get log(): Logger {
    this.#log ??= messageLogger(this.#consumerLog, { consumer: this.#consumer, messageId: this.#messageId });
    return this.#log;
  }
}

/** The consumer's logger with a message's fields added to every line. */
function messageLogger(log: Logger, fields: Record<string, unknown>): Logger {
  return {
    debug: (m, f) => log.debug(m, { ...fields, ...f }),
    info: (m, f) => log.info(m, { ...fields, ...f }),
    warn: (m, f) => log.warn(m, { ...fields, ...f }),
    error: (m, f) => log.error(m, { ...fields, ...f }),
  };
}

/**
 * True when the broker says this is the message's first delivery: a delivery count of 1,
 * or a `redelivered` flag that is false. A broker that tells neither may be redelivering.
 */
function isFirstDelivery(envelope: Delivery['envelope']): boolean {
  if (envelope.redelivered === true) return false;
  if (envelope.deliveryCount !== undefined) return envelope.deliveryCount <= 1;
  return envelope.redelivered === false;
}

/**
 * The delivery with its retry and release noting on `slot` that it is not done, so an
 * ordered batch it never joined stops before it (dispatchInOrder).
 */
function notingNotDone<TBody>(delivery: Delivery, slot: Slot<TBody>): Delivery {
  return {
    ...delivery,
    retryLater: (delayMs, info) => {
      slot.notDone = true;
      return delivery.retryLater(delayMs, info);
    },
    release: () => {
      slot.notDone = true;
      return delivery.release();
    },
  };
}

/**
 * The ordering group of a delivery from an ordered log (a Kafka partition): its records
 * must take effect in offset order. Undefined for a broker without offsets.
 */
function orderingGroupOf(envelope: Delivery['envelope']): string | undefined {
  const { offset } = envelope;
  return offset === undefined ? undefined : `${offset.topic}\u0000${offset.partition}`;
}

function isShutdown(signal: { readonly aborted: boolean; readonly reason: unknown }): boolean {
  return signal.aborted && isOncelyError(signal.reason, 'SHUTDOWN');
}

/** What a batch needs of a prepared delivery: its ID, fingerprint and ordering group. */
function batchMessage(entry: Prepared<unknown>): BatchMessage {
  return {
    messageId: entry.key.messageId,
    fingerprint: entry.fingerprint,
    orderingGroup: orderingGroupOf(entry.delivery.envelope),
  };
}

/**
 * Throws unless a finished handler's work may commit. A timed-out or shut-down handler
 * must not commit: it may have stopped half-way when it saw the signal. A lost lease
 * alone does not stop a finished handler from committing — the unique key settles the
 * race with whoever got the redelivery.
 */
function mayCommit(keeper: LeaseKeeper): void {
  if (isShutdown(keeper)) throw new ReleaseRequested();
  if (keeper.aborted && !(keeper.reason instanceof LeaseLostError)) throw keeper.reason;
}

/** A run counted up front: its message and the token the store knows it by. */
interface CountedRun {
  key: MessageKey;
  run: string;
}

function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Waits for `work` (which never rejects) or `ms`, whichever comes first; the work goes on either way. */
function settledWithin(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
