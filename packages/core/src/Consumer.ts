import { Batcher } from './Batcher.js';
import { CONSUMER_DEFAULTS, DEFAULT_BATCH_MAX_WAIT_MS, validateConsumerConfig } from './config.js';
import { ConfigError } from './errors.js';
import { resolveMessageId } from './idStrategy.js';
import { LeaseKeeper } from './LeaseKeeper.js';
import { stderrLogger, toLogger } from './logger.js';
import { AttemptLedger } from './pipeline/attemptLedger.js';
import { BatchRunner } from './pipeline/batchRunner.js';
import { Events } from './pipeline/events.js';
import { HandlerRunner } from './pipeline/handlerRunner.js';
import { Identify } from './pipeline/identify.js';
import { LeasedRunner } from './pipeline/leasedRunner.js';
import { Lifecycle } from './pipeline/lifecycle.js';
import { Settlement } from './pipeline/settlement.js';
import {
  type Held,
  LEASE_KEEPER,
  type Marked,
  type Pipeline,
  SETTLED,
  type Settings,
  type Slot,
} from './pipeline/shared.js';
import { StoreGuard } from './pipeline/storeGuard.js';
import { TransactionalRunner } from './pipeline/transactionalRunner.js';
import { Telemetry } from './telemetry.js';
import type {
  AdapterRuntime,
  BrokerAdapter,
  ConsumerConfig,
  ConsumerEvent,
  ConsumerEventName,
  Delivery,
  MessageKey,
  SqlClient,
} from './types.js';

/**
 * A running consumer: the one place that orders claim → run → commit → ack.
 *
 * It wires the pipeline's stages (packages/core/src/pipeline/, docs/architecture.md)
 * and walks each delivery through them in `handleDelivery`: identify and decode, count
 * the attempt, then one runner per mode (claim, handler, commit), each ending in the
 * settlement (ack, retry, release or dead-letter).
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
  private readonly p: Pipeline<TBody, Tx>;
  private readonly lifecycle: Lifecycle;
  private readonly identify: Identify<TBody, Tx>;
  private readonly leased: LeasedRunner<TBody, Tx>;

  constructor(
    config: ConsumerConfig<TBody, Tx>,
    private readonly adapter: BrokerAdapter,
  ) {
    validateConsumerConfig(config);
    const settings: Settings<TBody, Tx> = {
      ...CONSUMER_DEFAULTS,
      logger: stderrLogger,
      ...config,
      idStrategy: config.idStrategy ?? adapter.defaultIdStrategy,
    };
    const store = config.store;
    if (settings.mode === 'offsets' && !store.offsets) {
      throw new ConfigError('mode', "is 'offsets' but the store keeps no offsets");
    }
    if (settings.payloadFingerprint && !store.fingerprints) {
      throw new ConfigError('payloadFingerprint', 'is set but the store keeps no payload fingerprints');
    }
    const log = toLogger(settings.logger);
    const telemetry = new Telemetry(config.name, adapter.type, config.telemetry);
    // Each stage reaches the others through `p`; built before any of them runs.
    const p = { settings, store, adapter, log, telemetry, events: new Events(telemetry, log) } as {
      -readonly [K in keyof Pipeline<TBody, Tx>]: Pipeline<TBody, Tx>[K];
    };
    const untyped = p as unknown as Pipeline<unknown, unknown>;
    p.lifecycle = new Lifecycle(untyped);
    p.guard = new StoreGuard(untyped);
    p.ledger = new AttemptLedger(untyped);
    p.settlement = new Settlement(untyped);
    p.handlers = new HandlerRunner(p);
    p.transactional = new TransactionalRunner(p);
    p.batches = new BatchRunner(p);
    if (config.batch) {
      const { size, maxWaitMs = DEFAULT_BATCH_MAX_WAIT_MS } = config.batch;
      p.batcher = new Batcher(
        size,
        maxWaitMs,
        (batch) => p.batches.runBatch(batch),
        (error) => log.error('unexpected batch pipeline error', { error }),
      );
    }
    this.p = p;
    this.lifecycle = p.lifecycle;
    this.identify = new Identify(p);
    this.leased = new LeasedRunner(p);
  }

  /** Consumer name (the namespace of processed IDs). */
  get name(): string {
    return this.p.settings.name;
  }

  /** Handlers (and held deliveries) in flight right now. */
  get inFlightCount(): number {
    return this.lifecycle.inFlight;
  }

  /** Subscribes to a consumer event. */
  on(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): this {
    this.p.events.on(event, listener);
    return this;
  }

  off(event: ConsumerEventName, listener: (event: ConsumerEvent) => void): this {
    this.p.events.off(event, listener);
    return this;
  }

  /**
   * Starts fetching. Rejects when the store does not answer (or its schema is not
   * migrated), or the adapter cannot connect or finds the broker misconfigured.
   *
   * A `stop()` called while `start()` still checks the store wins: `start()` then resolves
   * without starting the adapter (the consumer stays stopped and receives nothing; a later
   * `start()` is refused), or rejects with the store's error if that check failed. A stop
   * at boot (a SIGTERM while `await consumer.start()` runs) is not an error.
   *
   * @example
   * ```ts
   * process.once('SIGTERM', () => void consumer.stop());
   * await consumer.start(); // resolves, receiving nothing, if SIGTERM came first
   * ```
   */
  start(): Promise<void> {
    return this.lifecycle.start(this.runtime());
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
   *
   * Called while the adapter is still starting (connecting, joining its group), `stop()`
   * first waits for that start to end, within `stopTimeoutMs`, then stops and closes what
   * it started: nothing is received after `stop()` resolves. A start still running at
   * that deadline is closed under it, and closed again once it ends.
   *
   * @example
   * ```ts
   * process.once('SIGTERM', () => void consumer.stop()); // also during start(): waits for the adapter's connect
   * await consumer.start();
   * ```
   */
  stop(): Promise<void> {
    return this.lifecycle.stop();
  }

  /** The adapter's view of the consumer. */
  private runtime(): AdapterRuntime {
    const { settings, store, log } = this.p;
    return {
      consumerName: settings.name,
      concurrency: settings.concurrency,
      mode: settings.mode,
      store,
      log,
      stopping: this.lifecycle.stopping.signal,
      whenReady: () => this.lifecycle.whenReady(),
      dispatch: (delivery) => this.dispatch(delivery),
      batchSize: settings.batch?.size,
      dispatchInOrder: (deliveries) =>
        this.p.batches.inOrder(deliveries, (d, slot) => this.dispatch(d, slot)),
      reportError: (error, context) => log.warn(`broker: ${context}`, { error }),
    };
  }

  private async dispatch(delivery: Delivery, slot?: Slot<TBody>): Promise<void> {
    const { lifecycle } = this;
    if (lifecycle.state !== 'running') {
      slot?.gathering.skip(slot.index, true);
      // Prefetched after stop() began: give it back now rather than let its lease run out.
      // Counted in flight, so stop() closes the adapter only after this release.
      lifecycle.inFlight++;
      try {
        const event = { consumer: this.p.settings.name, messageId: this.identify.idForLogs(delivery) };
        await this.p.settlement.release(delivery, event);
      } finally {
        lifecycle.inFlight--;
        lifecycle.wakeWaiters();
      }
      return;
    }
    lifecycle.inFlight++;
    try {
      const { telemetry } = this.p;
      // Without tracing, no span and no closure for one.
      if (telemetry.tracing())
        await telemetry.aroundDelivery(delivery, () => this.handleDelivery(delivery, slot));
      else await this.handleDelivery(delivery, slot);
    } catch (error) {
      // handleDelivery settles everything itself; reaching here is a bug, never a lost message
      // (the unsettled delivery returns when its lease lapses).
      this.p.log.error('unexpected pipeline error', { error });
    } finally {
      // Settled before it joined its ordered batch: dead-lettered (no ID, poison), the batch
      // runs without it; retried or released, the batch stops before it.
      slot?.gathering.skip(slot.index, slot.notDone);
      lifecycle.inFlight--;
      lifecycle.wakeWaiters();
    }
  }

  /**
   * The pipeline for one delivery: identify and decode it and count its attempt
   * (Identify), then run it in its mode — an ordered batch, the batcher, a lease, or its
   * own transaction — where the claim, the handler and the commit happen and the
   * settlement (ack after the commit) follows. Its lease keeper runs until then.
   */
  private async handleDelivery(delivery: Delivery, slot?: Slot<TBody>): Promise<void> {
    const { settings, store, events } = this.p;
    const messageId = resolveMessageId(settings.idStrategy, delivery.envelope);
    this.p.telemetry.identified(delivery, messageId);
    const base: ConsumerEvent = { consumer: settings.name, messageId };
    const key: MessageKey | undefined = messageId ? { consumer: settings.name, messageId } : undefined;
    const leased = settings.mode === 'leased';
    /** Leased mode: the DB claim this delivery holds, renewed by the keeper until completed. */
    let ownerOfClaim: string | undefined;
    const keeper = new LeaseKeeper({
      delivery,
      brokerLease: this.adapter.lease,
      renewBroker: settings.leaseRenewal,
      handlerTimeoutMs: settings.handlerTimeoutMs,
      claimMs: leased ? settings.leaseMs : undefined,
      renewClaim: leased
        ? async () => !ownerOfClaim || !key || store.renewLease(key, ownerOfClaim, settings.leaseMs)
        : undefined,
      onRenewed: () => events.emit('leaseRenewed', base),
      onLost: (error) => events.emit('leaseLost', { ...base, error }),
      onRenewError: (error) => this.p.log.warn('lease renewal failed; retrying', { ...base, error }),
    });
    (delivery as Marked)[LEASE_KEEPER] = keeper;
    const held: Held = { delivery, keeper, event: base };
    this.lifecycle.keepers.set(keeper, held);
    keeper.start();
    try {
      events.emit('received', base);
      const prepared = await this.identify.prepare(held, key);
      if (!prepared) return;
      if (slot) {
        await slot.gathering.add(slot.index, prepared);
        return;
      }
      if (this.p.batcher) {
        delivery.awaitingBatch?.();
        await this.p.batcher.add(prepared);
        return;
      }
      if (leased) {
        await this.leased.runLeased(prepared, (owner) => {
          ownerOfClaim = owner;
          if (owner) keeper.claimAcquired();
        });
        return;
      }
      await this.p.transactional.runOne(prepared);
    } finally {
      keeper.stop();
      this.lifecycle.keepers.delete(keeper);
      // The safety net: every path above settles the delivery; one that did not (a bug, or
      // a batch that failed in an unforeseen way) gives it back now rather than leave it
      // stranded until its lease lapses. A release is never counted as an attempt.
      if (!(delivery as Marked)[SETTLED]) {
        this.p.log.error('delivery left unsettled by the pipeline: releasing it', { ...base });
        await this.p.settlement.release(delivery, base);
      }
    }
  }
}
