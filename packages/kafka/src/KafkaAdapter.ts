import {
  type AdapterLease,
  type AdapterRuntime,
  type BrokerAdapter,
  type BrokerConfig,
  type Delivery,
  type IdStrategy,
  LeaseLostError,
  type Logger,
} from '@oncely/core';
import type {
  ClientBatch,
  ClusterAdmin,
  DeadLetterProducer,
  GroupConsumer,
  KafkaClientDriver,
  KafkaRecord,
} from './adapter/clientApi.js';
import { DispatchSlots } from './adapter/dispatchSlots.js';
import {
  classifyGroupError,
  extendLease,
  type Generation,
  lostError,
  type Settlement,
} from './adapter/groupMembership.js';
import { loadDriver } from './adapter/loadDriver.js';
import { publishDeadLetter } from './adapter/publishDeadLetter.js';
import { ensureDeadLetterTopic, topicPartitionCount } from './adapter/startup.js';
import { seekToStoredOffsets } from './adapter/storedOffsets.js';
import { defaultMessageId } from './client.js';
import { type ResolvedKafkaConfig, resolveKafkaConfig } from './config.js';
import { toEnvelope } from './envelope.js';

/** A record the core left unsettled comes back after this pause (no hot loop on a failing DLQ). */
const UNSETTLED_REDELIVERY_MS = 1000;
/** Rebuild delays after a crash kafkajs does not restart from itself. */
const REBUILD_MIN_MS = 1000;
const REBUILD_MAX_MS = 30_000;

/**
 * The Kafka adapter, on kafkajs 2.2.x or @platformatic/kafka (`broker.client`), through
 * the interface of `adapter/clientApi.ts`. A consumer group whose records come as batches
 * per partition with manual resolution and commits (kafkajs: `eachBatch`,
 * `eachBatchAutoResolve: false`, `autoCommit: false`), so no offset is resolved or
 * committed for a record whose store transaction has not committed.
 *
 * - Records of one partition are dispatched one at a time, in offset order (with the
 *   consumer's `batch` option: up to `batch.size` of them together, in order, as one
 *   transaction; see `deliverInOrder`); partitions run concurrently
 *   (`partitionsConsumedConcurrently`, default the consumer's concurrency).
 * - A partition's committed offset only ever moves to the end of its done prefix: a
 *   record that is not done (retry, release) blocks the partition and is fetched again.
 * - Retries are in place: the partition is paused for the backoff delay and the record
 *   fetched again, so later records of that partition wait (ordering), others go on.
 * - kafkajs sends heartbeats only when asked: `extendLease` sends one, and the core's
 *   lease keeper calls it while a handler runs.
 * - Dead letters are produced to `<topic>.dlq` (headers carry the reason) before the
 *   offset is committed.
 *
 * @example
 * ```ts
 * const adapter = new KafkaAdapter({ type: 'kafka', brokers: ['localhost:9092'], topic: 'orders' }, { consumerName: 'orders', log });
 * const consumer = new Consumer({ name: 'orders', broker: { type: 'kafka', brokers: ['localhost:9092'], topic: 'orders' }, store, handler }, adapter);
 * ```
 */
export class KafkaAdapter implements BrokerAdapter {
  readonly type = 'kafka';
  /** The bootstrap brokers, for the error of a failed start. */
  get address(): string {
    return this.config.brokers.join(',');
  }
  readonly lease: AdapterLease;
  /** The `message-id` header, or in `offsets` mode the offset (see `defaultMessageId`). */
  readonly defaultIdStrategy: IdStrategy = (envelope) => defaultMessageId(envelope, this.runtime?.mode);
  /** The checked config with defaults applied. */
  readonly config: ResolvedKafkaConfig;

  private readonly consumerName: string;
  private readonly log: Logger;
  private runtime: AdapterRuntime | undefined;
  private driver: KafkaClientDriver | undefined;
  private consumer: GroupConsumer | undefined;
  private producer: DeadLetterProducer | undefined;
  private admin: ClusterAdmin | undefined;
  private generation: Generation;
  private generationCount = 0;
  private lastHeartbeatAt = 0;
  /**
   * When kafkajs last sent a heartbeat (its HEARTBEAT event only). kafkajs sends one only
   * when `heartbeatInterval` has passed since its own last one, which is never before
   * this: a heartbeat asked for earlier is a no-op, skipped between records.
   */
  private heartbeatSentAt = 0;
  private stopRequested = false;
  /** The last close(): a later one runs after it. */
  private closing: Promise<void> | undefined;
  private readonly activeBatches = new Set<Promise<void>>();
  private readonly timers = new Set<NodeJS.Timeout>();
  /** Highest offset dispatched per partition by this member, across generations. */
  private readonly highestDispatched = new Map<number, bigint>();
  /**
   * Offsets per partition this member has written a dead letter for and not yet resolved:
   * a record dead-lettered behind one that then failed is fetched again with it, and its
   * dead letter must not be written a second time.
   */
  private readonly deadLettered = new Map<number, Set<bigint>>();
  private rebuildDelayMs = REBUILD_MIN_MS;
  /** Partitions in a retry backoff: not before this time (ms since epoch). */
  private readonly holds = new Map<number, number>();
  /** Slots taken from the core and the waits close() may abandon. */
  private readonly slots: DispatchSlots;

  constructor(broker: BrokerConfig, options: { consumerName: string; log: Logger }) {
    this.config = resolveKafkaConfig(broker, options.consumerName);
    this.consumerName = options.consumerName;
    this.log = options.log;
    // The keeper renews at half of extendByMs: a heartbeat every third of the session.
    this.lease = { extendByMs: Math.floor((this.config.sessionTimeout * 2) / 3) };
    this.generation = this.newGeneration(new Set());
    this.slots = new DispatchSlots(this.config.heartbeatInterval);
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    this.runtime = runtime;
    const { config } = this;
    const context = { config, log: runtime.log, concurrency: runtime.concurrency };
    this.driver = await loadDriver(context);
    this.admin = this.driver.admin();
    await this.admin.connect();
    const partitions = await topicPartitionCount(this.admin, config.topic);
    await ensureDeadLetterTopic(this.admin, config, partitions);
    this.producer = this.driver.producer();
    await this.producer.connect();
    await this.startConsumer();
  }

  /**
   * Stops dispatching: running batches end after their current record and commit what is
   * done. Every partition is paused, so kafkajs does not fetch the records the ending
   * batches left unresolved again and again while the last handlers drain.
   */
  async stop(): Promise<void> {
    this.stopRequested = true;
    // A retry's scheduled resume must not unpause a partition after this.
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.slots.wakeSlotWaiters();
    this.pauseAll();
  }

  /**
   * Waits up to `closeTimeoutMs` for running batches to commit, then leaves the group and
   * disconnects. A handler still running then (one that ignores `ctx.signal`) is
   * abandoned: its batch returns without it, so kafkajs' disconnect, which waits for
   * every running batch, cannot hang. Its record is not committed and goes to the next
   * owner, where the processed marker (or the stored offset) absorbs a late commit.
   */
  close(): Promise<void> {
    // A second close (the core's, after a start that ended past stop()'s deadline) runs
    // after the first and disconnects what that start connected since: a consumer left
    // in the group would hold its partitions.
    const previous = this.closing;
    this.closing = (async () => {
      await previous?.catch(() => {});
      await this.closeClients();
    })();
    return this.closing;
  }

  private async closeClients(): Promise<void> {
    if (!this.stopRequested) await this.stop();
    const { closeTimeoutMs } = this.config;
    await waitAtMost(Promise.allSettled([...this.activeBatches]), closeTimeoutMs);
    if (this.activeBatches.size > 0) {
      this.log.warn('kafka: handlers still running at close; their records are left to the next owner', {
        consumer: this.consumerName,
        inFlight: this.slots.inFlight,
      });
      this.slots.abandon();
      await waitAtMost(Promise.allSettled([...this.activeBatches]), closeTimeoutMs);
    }
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    const errors: unknown[] = [];
    // disconnect() leaves the group (LeaveGroup), so the partitions move at once.
    for (const client of [this.consumer, this.producer, this.admin]) {
      if (!client) continue;
      await waitAtMost(
        client.disconnect().catch((error: unknown) => errors.push(error)),
        closeTimeoutMs,
      );
    }
    if (errors.length > 0) this.log.warn('kafka: errors while disconnecting', { error: errors[0] });
  }

  private pauseAll(): void {
    this.consumer?.pauseAll();
  }

  // ------------------------------------------------------------------------------------
  // Setup
  // ------------------------------------------------------------------------------------

  private async startConsumer(): Promise<void> {
    const consumer = this.driver!.consumer();
    this.consumer = consumer;
    await consumer.run({
      onAssigned: (partitions) => this.onGroupJoin(consumer, partitions),
      onHeartbeat: () => {
        this.lastHeartbeatAt = Date.now();
        this.heartbeatSentAt = this.lastHeartbeatAt;
      },
      onCrash: (error, restart) => this.onCrash(consumer, error, restart),
      eachBatch: (payload) => this.trackBatch(payload),
    });
    if (this.stopRequested) this.pauseAll();
  }

  private newGeneration(partitions: ReadonlySet<number>): Generation {
    return {
      id: ++this.generationCount,
      partitions,
      committed: new Map(),
      storedOffsets: Promise.resolve(new Map()),
      started: new Set(),
    };
  }

  /** A new generation (the client calls it before the first fetch of the assignment). */
  private onGroupJoin(consumer: GroupConsumer, assigned: number[]): void {
    const generation = this.newGeneration(new Set(assigned));
    this.generation = generation;
    this.lastHeartbeatAt = Date.now();
    this.rebuildDelayMs = REBUILD_MIN_MS;
    this.log.info('kafka: partitions assigned', {
      consumer: this.consumerName,
      topic: this.config.topic,
      partitions: assigned,
    });
    if (this.runtime?.mode === 'offsets' && assigned.length > 0) {
      // The read is asynchronous and kafkajs fetches at once, so the first batches may
      // come before it lands: they wait for it (processBatch), and the conditional
      // upsert in the transaction is what guarantees correctness either way.
      generation.storedOffsets = seekToStoredOffsets(
        {
          config: this.config,
          runtime: this.runtime,
          admin: this.admin!,
          consumerName: this.consumerName,
          log: this.log,
          generation: () => this.generation,
        },
        consumer,
        generation,
      );
    }
  }

  private onCrash(consumer: GroupConsumer, error: Error, restart: boolean): void {
    this.runtime?.reportError(
      error,
      restart ? `kafka consumer crashed; ${this.driver?.name} restarts it` : 'kafka consumer crashed',
    );
    if (restart || this.stopRequested || consumer !== this.consumer) return;
    // kafkajs gives up on errors it deems non-retriable; a consumer must not stay dead
    // (a broker restart can surface as one), so build a new client after a pause.
    const delay = this.rebuildDelayMs;
    this.rebuildDelayMs = Math.min(REBUILD_MAX_MS, this.rebuildDelayMs * 2);
    this.schedule(delay, async () => {
      if (this.stopRequested || consumer !== this.consumer) return;
      await consumer.disconnect().catch(() => {});
      try {
        await this.startConsumer();
      } catch (startError) {
        this.onCrash(this.consumer!, startError as Error, false);
      }
    });
  }

  private schedule(delayMs: number, action: () => unknown): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      void action();
    }, delayMs);
    this.timers.add(timer);
  }

  // ------------------------------------------------------------------------------------
  // Batches
  // ------------------------------------------------------------------------------------

  private trackBatch(payload: ClientBatch): Promise<void> {
    const run = this.processBatch(payload);
    const tracked = run.catch(() => {});
    this.activeBatches.add(tracked);
    void tracked.finally(() => this.activeBatches.delete(tracked));
    return run;
  }

  private async processBatch(payload: ClientBatch): Promise<void> {
    const { batch, resolveOffset, isStale, isRunning } = payload;
    const generation = this.generation;
    const runtime = this.runtime!;
    if (batch.topic !== this.config.topic) return;
    const { partition } = batch;
    const heartbeat = () => this.heartbeat(payload, generation);
    const mustLeave = () =>
      this.stopRequested ||
      !isRunning() ||
      isStale() ||
      generation !== this.generation ||
      generation.rebalancing !== undefined ||
      generation.lost !== undefined;

    let storedNext: bigint | undefined;
    if (runtime.mode === 'offsets') {
      const storedOffsets = await this.slots.heartbeatWhile(generation.storedOffsets, heartbeat, mustLeave);
      // The read did not land before the batch had to end: nothing was resolved.
      if (storedOffsets === undefined) return this.endBatch(generation);
      const stored = storedOffsets.get(partition);
      if (stored !== undefined) storedNext = BigInt(stored);
    }
    /** Next offset after the records of this batch that are done (the commit point). */
    let doneNext: bigint | undefined;
    let lastCommitAt = Date.now();
    const { messages } = batch;
    try {
      for (let index = 0; index < messages.length; ) {
        const message = messages[index]!;
        if (mustLeave()) break;
        const offset = BigInt(message.offset);
        if (storedNext !== undefined && offset < storedNext) {
          // offsets mode: an earlier owner applied it (its transaction stored a later next offset).
          resolveOffset(message.offset);
          doneNext = offset + 1n;
          index++;
          continue;
        }
        // A retry backoff still running (the kafkajs pause that held it is gone when
        // kafkajs restarted the consumer or the partition came back in a rebalance).
        const heldFor = this.heldFor(partition);
        if (heldFor > 0) {
          if (!this.stopRequested) this.schedule(heldFor, payload.pause());
          break;
        }
        if (!(await this.slots.waitForSlot(runtime, heartbeat, mustLeave))) break;
        const window = [message, ...this.slots.reserveMore(runtime, messages, index + 1, storedNext)];
        let settlements: Settlement[];
        try {
          if (mustLeave()) break;
          settlements =
            runtime.batchSize === undefined || !runtime.dispatchInOrder
              ? [await this.deliver(batch, message, payload, generation)]
              : await this.deliverInOrder(batch, window, payload, generation);
        } finally {
          this.slots.freeSlots(window.length);
        }
        // The done prefix only: the first record not done holds the partition, and the
        // ones after it (released by the core) are fetched again after it.
        const done = settlements.findIndex((settlement) => settlement.kind !== 'done');
        for (const record of done === -1 ? window : window.slice(0, done)) {
          resolveOffset(record.offset);
          doneNext = BigInt(record.offset) + 1n;
        }
        if (doneNext !== undefined) this.forgetDeadLetters(partition, doneNext);
        if (done !== -1) {
          this.holdPartition(settlements[done]!, payload);
          break;
        }
        index += window.length;
        // Only when one is due: kafkajs would send nothing otherwise, after several awaits per record.
        if (Date.now() - this.heartbeatSentAt >= this.config.heartbeatInterval) await heartbeat();
        if (doneNext !== undefined && Date.now() - lastCommitAt >= this.config.commitIntervalMs) {
          await this.commit(generation, partition, doneNext, isStale);
          lastCommitAt = Date.now();
        }
      }
    } finally {
      if (doneNext !== undefined) await this.commit(generation, partition, doneNext, isStale);
    }
    this.endBatch(generation);
  }

  /**
   * Hands kafkajs the group error it needs to see to rejoin now, rather than after its
   * next throttled heartbeat.
   */
  private endBatch(generation: Generation): void {
    const groupError = generation.lost ?? generation.rebalancing;
    if (groupError !== undefined && generation === this.generation && !this.stopRequested) throw groupError;
  }

  /**
   * Not done: the partition must not move past this record. kafkajs fetches from the
   * last resolved offset, which is this record, once the partition is resumed.
   */
  private holdPartition(settlement: Settlement, payload: ClientBatch): void {
    const delayMs =
      settlement.kind === 'retry'
        ? settlement.delayMs
        : settlement.kind === 'unsettled'
          ? UNSETTLED_REDELIVERY_MS
          : 0;
    if (delayMs <= 0) return;
    // Kept here as well as in kafkajs' pause: that pause belongs to one run of the
    // kafkajs consumer and is lost when kafkajs restarts it after a crash.
    this.holds.set(payload.batch.partition, Date.now() + delayMs);
    if (this.stopRequested) return;
    const resume = payload.pause();
    this.schedule(delayMs, resume);
  }

  /** Milliseconds a partition's retry backoff still runs (0: none). */
  private heldFor(partition: number): number {
    const until = this.holds.get(partition);
    if (until === undefined) return 0;
    const left = until - Date.now();
    if (left > 0) return left;
    this.holds.delete(partition);
    return 0;
  }

  /** Resolved records never come back to this member: their dead-letter marks can go. */
  private forgetDeadLetters(partition: number, next: bigint): void {
    const written = this.deadLettered.get(partition);
    if (!written) return;
    for (const offset of written) if (offset < next) written.delete(offset);
    if (written.size === 0) this.deadLettered.delete(partition);
  }

  private async deliver(
    batch: ClientBatch['batch'],
    message: KafkaRecord,
    payload: ClientBatch,
    generation: Generation,
  ): Promise<Settlement> {
    const { delivery, settlement } = this.toDelivery(batch, message, payload, generation);
    // close() abandons a handler that outlives its wait: the record stays uncommitted.
    await this.slots.unlessAbandoned(this.runtime!.dispatch(delivery));
    return settlement();
  }

  /**
   * Records of one partition, in offset order, as one batch of the core: one transaction
   * for all of them; what follows a failed record is released (not committed before it).
   */
  private async deliverInOrder(
    batch: ClientBatch['batch'],
    messages: KafkaRecord[],
    payload: ClientBatch,
    generation: Generation,
  ): Promise<Settlement[]> {
    const deliveries = messages.map((message) => this.toDelivery(batch, message, payload, generation));
    await this.slots.unlessAbandoned(
      this.runtime!.dispatchInOrder!(deliveries.map(({ delivery }) => delivery)),
    );
    return deliveries.map(({ settlement }) => settlement());
  }

  /**
   * A record as a Delivery. `settlement()` closes it: a settle call after that (a handler
   * close() abandoned) changes nothing, and an unsettled record is `unsettled`.
   */
  private toDelivery(
    batch: ClientBatch['batch'],
    message: KafkaRecord,
    payload: ClientBatch,
    generation: Generation,
  ): { delivery: Delivery; settlement: () => Settlement } {
    let settlement: Settlement | undefined;
    let open = true;
    const settle = (value: Settlement) => {
      if (open && settlement === undefined) settlement = value;
    };
    const envelope = toEnvelope(batch.topic, batch.partition, message);
    envelope.redelivered = this.mayBeRedelivery(batch.partition, BigInt(message.offset), generation);
    const delivery: Delivery = {
      envelope,
      ack: async () => {
        await this.confirmMembership(payload, generation);
        settle({ kind: 'done' });
      },
      retryLater: async (delayMs) => settle({ kind: 'retry', delayMs }),
      deadLetter: async (reason, detail, info) => {
        const offset = BigInt(message.offset);
        if (!this.deadLettered.get(batch.partition)?.has(offset)) {
          const target = {
            producer: this.producer!,
            deadLetterTopic: this.config.deadLetterTopic,
            consumerName: this.consumerName,
            runtime: this.runtime,
            timeoutMs: this.config.requestTimeout,
          };
          await publishDeadLetter(target, batch, message, reason, detail, info?.attempt);
          const written = this.deadLettered.get(batch.partition) ?? new Set<bigint>();
          this.deadLettered.set(batch.partition, written.add(offset));
        }
        settle({ kind: 'done' });
      },
      release: async () => settle({ kind: 'release' }),
      extendLease: async () => extendLease(payload, generation),
    };
    return {
      delivery,
      settlement: () => {
        open = false;
        return settlement ?? { kind: 'unsettled' };
      },
    };
  }

  /**
   * Kafka keeps no delivery count, and the core counts a run up front only when a record
   * may be a redelivery (so the happy path writes nothing but the marker). A record may
   * be one when this member dispatched it before (a retry fetched again), or when it is
   * the first record of a partition after an assignment: the previous owner may have
   * been running it when it crashed or was evicted. Every later record of the partition
   * is new to the group. So a record that crashes its consumer every time still reaches
   * `maxAttempts`, at the cost of one counter write per partition per rebalance (the core
   * deletes the row once the record is processed).
   */
  private mayBeRedelivery(partition: number, offset: bigint, generation: Generation): boolean {
    const highest = this.highestDispatched.get(partition);
    const firstOfAssignment = !generation.started.has(partition);
    generation.started.add(partition);
    if (highest === undefined || offset > highest) this.highestDispatched.set(partition, offset);
    return firstOfAssignment || (highest !== undefined && offset <= highest);
  }

  // ------------------------------------------------------------------------------------
  // Group membership: heartbeats are this broker's lease
  // ------------------------------------------------------------------------------------

  /** Heartbeat between records; records group errors instead of throwing. */
  private async heartbeat(payload: ClientBatch, generation: Generation): Promise<void> {
    try {
      await extendLease(payload, generation);
    } catch (error) {
      if (generation.lost === undefined) this.runtime!.reportError(error, 'heartbeat failed');
    }
  }

  /**
   * Before marking a record done, make sure this member still belongs to the group when
   * it may have been silent for a whole session (renewal off, long stall): a settle on a
   * lost membership is reported as a failed ack (`LeaseLostError`), never committed.
   */
  private async confirmMembership(payload: ClientBatch, generation: Generation): Promise<void> {
    if (generation.lost !== undefined) throw lostError(generation.lost);
    if (Date.now() - this.lastHeartbeatAt < this.config.sessionTimeout) return;
    try {
      await extendLease(payload, generation);
    } catch (error) {
      if (error instanceof LeaseLostError) throw error;
      // A connection error says nothing about membership; the commit decides.
    }
  }

  /** Commits `next` for a partition this generation still owns; never throws. */
  private async commit(
    generation: Generation,
    partition: number,
    next: bigint,
    isStale: () => boolean,
  ): Promise<void> {
    if (
      generation !== this.generation ||
      generation.lost !== undefined ||
      isStale() ||
      !generation.partitions.has(partition)
    ) {
      return;
    }
    const last = generation.committed.get(partition);
    if (last !== undefined && last >= next) return;
    try {
      await this.consumer!.commit(partition, next);
      generation.committed.set(partition, next);
    } catch (error) {
      if (classifyGroupError(error) === 'lost') generation.lost = error;
      this.runtime!.reportError(
        error,
        `offset commit failed for partition ${partition}: records after the last commit will be delivered again and skipped as duplicates`,
      );
    }
  }
}

async function waitAtMost(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
