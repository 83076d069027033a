import {
  type AdapterLease,
  type AdapterRuntime,
  type BrokerAdapter,
  type BrokerConfig,
  type DeadLetterReason,
  type Delivery,
  type IdStrategy,
  LeaseLostError,
  type Logger,
} from '@oncely/core';
import type {
  Admin,
  Batch,
  ConsumerCrashEvent,
  ConsumerGroupJoinEvent,
  EachBatchPayload,
  Kafka as KafkaClient,
  Consumer as KafkaConsumer,
  KafkaMessage,
  Message,
  Producer,
} from 'kafkajs';
import { buildKafkaClient, defaultMessageId } from './client.js';
import { type ResolvedKafkaConfig, resolveKafkaConfig } from './config.js';
import { DEAD_LETTER_HEADERS, deadLetterRecord } from './deadLetter.js';
import { toEnvelope } from './envelope.js';
import { KafkaTopicMissingError } from './errors.js';
import { kafkaLogCreator } from './kafkaLogger.js';
import { MESSAGE_ID_HEADER } from './send.js';
import { createTopics } from './topics.js';

/** How one dispatched record ended, from the adapter's side. */
type Settlement =
  /** Acked or dead-lettered: its offset may be committed. */
  | { kind: 'done' }
  /** Deliver it again after `delayMs`, the partition blocked meanwhile. */
  | { kind: 'retry'; delayMs: number }
  /** Given back (stop, store outage): not committed, fetched again. */
  | { kind: 'release' }
  /** The core settled nothing (a settle call failed): fetched again after a pause. */
  | { kind: 'unsettled' };

/**
 * One group generation as this member saw it (one per `GROUP_JOIN`). kafkajs rejoins
 * only after every running `eachBatch` returned, so a batch belongs to exactly one
 * generation from start to end.
 */
interface Generation {
  readonly id: number;
  /** Partitions of our topic assigned to this member in this generation. */
  readonly partitions: ReadonlySet<number>;
  /** Next offsets this generation committed, per partition. */
  readonly committed: Map<number, bigint>;
  /** `offsets` mode: the stored next offsets read at assignment (empty otherwise). */
  storedOffsets: Promise<Map<number, string>>;
  /** Partitions this generation has dispatched a record of (see `mayBeRedelivery`). */
  readonly started: Set<number>;
  /** A heartbeat reported a rebalance: end batches so kafkajs can rejoin. */
  rebalancing?: unknown;
  /** A heartbeat reported that this member is out of the group: nothing may be committed. */
  lost?: unknown;
}

/**
 * Already fulfilled: raced after a promise, it wins only when that promise is still
 * pending (fulfilled promises' reactions run in the order they were raced).
 */
const NOT_YET = Promise.resolve('not-yet' as const);

/** A record the core left unsettled comes back after this pause (no hot loop on a failing DLQ). */
const UNSETTLED_REDELIVERY_MS = 1000;
/** Rebuild delays after a crash kafkajs does not restart from itself. */
const REBUILD_MIN_MS = 1000;
const REBUILD_MAX_MS = 30_000;

/**
 * The Kafka adapter (kafkajs 2.2.x). A consumer group consumed with `eachBatch`,
 * `eachBatchAutoResolve: false` and `autoCommit: false`, so no offset is resolved or
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
  private kafka: KafkaClient | undefined;
  private consumer: KafkaConsumer | undefined;
  private producer: Producer | undefined;
  private admin: Admin | undefined;
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
  private closed = false;
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
  /** Records this adapter has dispatched (or reserved a slot for) that are not settled yet. */
  private inFlight = 0;
  /** Wakes batches waiting for a slot when a dispatched record settles. */
  private slotWaiters: Array<() => void> = [];
  /** Set when close() gives up waiting for handlers: running batches return without them. */
  private abandoned = false;
  /** Ends each wait of `unlessAbandoned` at once; a wait removes its own entry when its work settles. */
  private readonly abandonWaiters = new Set<() => void>();

  constructor(broker: BrokerConfig, options: { consumerName: string; log: Logger }) {
    this.config = resolveKafkaConfig(broker, options.consumerName);
    this.consumerName = options.consumerName;
    this.log = options.log;
    // The keeper renews at half of extendByMs: a heartbeat every third of the session.
    this.lease = { extendByMs: Math.floor((this.config.sessionTimeout * 2) / 3) };
    this.generation = this.newGeneration(new Set());
  }

  async start(runtime: AdapterRuntime): Promise<void> {
    this.runtime = runtime;
    const { config } = this;
    this.kafka =
      (config.kafka as KafkaClient | undefined) ??
      buildKafkaClient(config, { logCreator: kafkaLogCreator(runtime.log) });
    this.admin = this.kafka.admin();
    await this.admin.connect();
    const partitions = await this.topicPartitionCount(config.topic);
    await this.ensureDeadLetterTopic(partitions);
    // Idempotent: a retried send after a lost acknowledgement does not write the dead letter twice.
    this.producer = this.kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: false,
      // kafkajs refuses an idempotent producer without retries (broker.retry.retries: 0).
      ...(config.retry?.retries === 0 ? { retry: { retries: 1 } } : {}),
    });
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
    this.wakeSlotWaiters();
    this.pauseAll();
  }

  /**
   * Waits up to `closeTimeoutMs` for running batches to commit, then leaves the group and
   * disconnects. A handler still running then (one that ignores `ctx.signal`) is
   * abandoned: its batch returns without it, so kafkajs' disconnect, which waits for
   * every running batch, cannot hang. Its record is not committed and goes to the next
   * owner, where the processed marker (or the stored offset) absorbs a late commit.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (!this.stopRequested) await this.stop();
    const { closeTimeoutMs } = this.config;
    await waitAtMost(Promise.allSettled([...this.activeBatches]), closeTimeoutMs);
    if (this.activeBatches.size > 0) {
      this.log.warn('kafka: handlers still running at close; their records are left to the next owner', {
        consumer: this.consumerName,
        inFlight: this.inFlight,
      });
      this.abandon();
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
    const consumer = this.consumer;
    if (!consumer) return;
    try {
      consumer.pause([{ topic: this.config.topic }]);
    } catch (error) {
      // kafkajs throws when the consumer is not running (crashed, being rebuilt): nothing fetches then.
      this.log.debug('kafka: pausing on stop failed', { error });
    }
  }

  // ------------------------------------------------------------------------------------
  // Setup
  // ------------------------------------------------------------------------------------

  private async topicPartitionCount(topic: string): Promise<number> {
    try {
      const metadata = await this.admin!.fetchTopicMetadata({ topics: [topic] });
      return metadata.topics[0]?.partitions.length ?? 0;
    } catch (error) {
      if ((error as { type?: string }).type === 'UNKNOWN_TOPIC_OR_PARTITION') {
        throw new KafkaTopicMissingError(topic, `Kafka topic '${topic}' does not exist (broker.topic)`, {
          cause: error,
        });
      }
      throw error;
    }
  }

  private async ensureDeadLetterTopic(partitions: number): Promise<void> {
    const { deadLetterTopic, createDeadLetterTopic } = this.config;
    const existing = await this.admin!.listTopics();
    if (existing.includes(deadLetterTopic)) return;
    if (!createDeadLetterTopic) {
      throw new KafkaTopicMissingError(
        deadLetterTopic,
        `dead-letter topic '${deadLetterTopic}' does not exist; create it or set broker.createDeadLetterTopic`,
      );
    }
    try {
      // createTopics counts a topic another consumer of the group created at the same
      // moment as existing.
      await createTopics(this.admin!, [{ topic: deadLetterTopic, numPartitions: Math.max(1, partitions) }]);
    } catch (error) {
      throw new KafkaTopicMissingError(
        deadLetterTopic,
        `dead-letter topic '${deadLetterTopic}' does not exist and could not be created: create it or set broker.deadLetterTopic`,
        { cause: error },
      );
    }
  }

  private async startConsumer(): Promise<void> {
    const { config } = this;
    const consumer = this.kafka!.consumer({
      groupId: config.groupId,
      sessionTimeout: config.sessionTimeout,
      heartbeatInterval: config.heartbeatInterval,
      rebalanceTimeout: config.rebalanceTimeout,
      maxWaitTimeInMs: config.maxWaitTimeInMs,
      ...(config.maxBytesPerPartition ? { maxBytesPerPartition: config.maxBytesPerPartition } : {}),
      ...(config.minBytes !== undefined ? { minBytes: config.minBytes } : {}),
      ...(config.maxBytes !== undefined ? { maxBytes: config.maxBytes } : {}),
      ...(config.rackId !== undefined ? { rackId: config.rackId } : {}),
      // kafkajs' consumer() defaults its own retries to 5 over the client's settings.
      ...(config.retry ? { retry: config.retry } : {}),
      allowAutoTopicCreation: false,
    });
    consumer.on(consumer.events.GROUP_JOIN, (event) => this.onGroupJoin(consumer, event));
    consumer.on(consumer.events.HEARTBEAT, () => {
      this.lastHeartbeatAt = Date.now();
      this.heartbeatSentAt = this.lastHeartbeatAt;
    });
    consumer.on(consumer.events.CRASH, (event) => this.onCrash(consumer, event));
    this.consumer = consumer;
    await consumer.connect();
    await consumer.subscribe({ topics: [config.topic], fromBeginning: config.fromBeginning });
    await consumer.run({
      autoCommit: false,
      // kafkajs would otherwise resolve batch.lastOffset() whenever eachBatch returns,
      // committing records that never ran.
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: config.partitionsConsumedConcurrently ?? this.runtime!.concurrency,
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

  /**
   * kafkajs has no rebalance listener; GROUP_JOIN (emitted synchronously after
   * SyncGroup, before the first fetch) is the nearest hook.
   */
  private onGroupJoin(consumer: KafkaConsumer, event: ConsumerGroupJoinEvent): void {
    const assigned = event.payload.memberAssignment[this.config.topic] ?? [];
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
      generation.storedOffsets = this.seekToStoredOffsets(consumer, generation);
    }
  }

  /**
   * `offsets` mode: seek each assigned partition to the stored next offset when it is
   * ahead of the group's committed offset (our Kafka commits trail the store). Never
   * seeks backwards: records dead-lettered or skipped never advanced the stored offset.
   */
  private async seekToStoredOffsets(
    consumer: KafkaConsumer,
    generation: Generation,
  ): Promise<Map<number, string>> {
    const { topic, groupId } = this.config;
    try {
      const stored = await this.runtime!.store.offsets!.read(this.consumerName, topic);
      const committed = await this.admin!.fetchOffsets({ groupId, topics: [topic] });
      const committedBy = new Map(committed[0]?.partitions.map((p) => [p.partition, BigInt(p.offset)]) ?? []);
      for (const partition of generation.partitions) {
        const next = stored.get(partition);
        if (next === undefined || generation !== this.generation) continue;
        if (BigInt(next) > (committedBy.get(partition) ?? -1n)) {
          consumer.seek({ topic, partition, offset: next });
          this.log.debug('kafka: seek to stored offset', {
            consumer: this.consumerName,
            topic,
            partition,
            offset: next,
          });
        }
      }
      return stored;
    } catch (error) {
      this.runtime!.reportError(
        error,
        'offsets mode: could not read stored offsets at assignment; records already applied are skipped by the conditional upsert',
      );
      return new Map();
    }
  }

  private onCrash(consumer: KafkaConsumer, event: ConsumerCrashEvent): void {
    const { error, restart } = event.payload;
    this.runtime?.reportError(
      error,
      restart ? 'kafka consumer crashed; kafkajs restarts it' : 'kafka consumer crashed',
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
        this.onCrash(this.consumer!, {
          payload: { error: startError as Error, groupId: this.config.groupId, restart: false },
        } as ConsumerCrashEvent);
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

  private trackBatch(payload: EachBatchPayload): Promise<void> {
    const run = this.processBatch(payload);
    const tracked = run.catch(() => {});
    this.activeBatches.add(tracked);
    void tracked.finally(() => this.activeBatches.delete(tracked));
    return run;
  }

  private async processBatch(payload: EachBatchPayload): Promise<void> {
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
      const storedOffsets = await this.heartbeatWhile(generation.storedOffsets, heartbeat, mustLeave);
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
        if (!(await this.waitForSlot(heartbeat, mustLeave))) break;
        const window = [message, ...this.reserveMore(messages, index + 1, storedNext)];
        let settlements: Settlement[];
        try {
          if (mustLeave()) break;
          settlements =
            runtime.batchSize === undefined || !runtime.dispatchInOrder
              ? [await this.deliver(batch, message, payload, generation)]
              : await this.deliverInOrder(batch, window, payload, generation);
        } finally {
          this.freeSlots(window.length);
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
   * Waits for `work`, heartbeating every `heartbeatInterval` so the group keeps this
   * member (a slow store must not get it evicted). Undefined when the batch must end
   * first, or close() gave up waiting.
   */
  private async heartbeatWhile<T>(
    work: Promise<T>,
    heartbeat: () => Promise<void>,
    mustLeave: () => boolean,
  ): Promise<T | undefined> {
    const done = this.unlessAbandoned(work.then((value) => ({ value })));
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<'tick'>((resolve) => {
        timer = setTimeout(() => resolve('tick'), this.config.heartbeatInterval);
      });
      const result = await Promise.race([done, tick]);
      clearTimeout(timer);
      if (result === undefined) return undefined;
      if (result !== 'tick') return result.value;
      if (mustLeave()) return undefined;
      await heartbeat();
      if (mustLeave()) return undefined;
    }
  }

  /**
   * Not done: the partition must not move past this record. kafkajs fetches from the
   * last resolved offset, which is this record, once the partition is resumed.
   */
  private holdPartition(settlement: Settlement, payload: EachBatchPayload): void {
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

  /**
   * Waits until the core takes work (it holds new work back while the store is down, and
   * while every slot is busy), heartbeating meanwhile so the group keeps this member.
   * False once the batch must end: stopping, or a heartbeat saw a rebalance or the loss
   * of the membership. kafkajs rejoins only after every eachBatch returned, so a batch
   * that kept waiting here would hold the whole group's rebalance until this member is
   * evicted (rebalanceTimeout).
   */
  private async waitForSlot(heartbeat: () => Promise<void>, mustLeave: () => boolean): Promise<boolean> {
    const runtime = this.runtime!;
    let ready: Promise<number | 'freed'> = this.nextSlot(runtime);
    for (;;) {
      // Usually a slot is free and the answer already there: no heartbeat timer for that
      // (a timer per record was a fifth of the adapter's CPU per record).
      let result: number | 'freed' | 'tick' | 'not-yet' = await Promise.race([ready, NOT_YET]);
      if (result === 'not-yet') {
        let timer: NodeJS.Timeout | undefined;
        const tick = new Promise<'tick'>((resolve) => {
          timer = setTimeout(() => resolve('tick'), this.config.heartbeatInterval);
        });
        result = await Promise.race([ready, tick]);
        clearTimeout(timer);
      }
      if (result === 'freed') {
        ready = this.nextSlot(runtime);
        continue;
      }
      if (result !== 'tick') {
        if (result <= 0) return false;
        // The core's whenReady() reserves nothing, and every partition's batch asks it:
        // reserve here, synchronously, so concurrent batches never exceed concurrency.
        if (this.inFlight < runtime.concurrency) {
          this.inFlight++;
          return true;
        }
        ready = this.nextSlot(runtime);
        continue;
      }
      if (mustLeave()) return false;
      await heartbeat();
      if (mustLeave()) return false;
    }
  }

  /** The core's answer, or 'freed' when one of our records settled while every slot was ours. */
  private nextSlot(runtime: AdapterRuntime): Promise<number | 'freed'> {
    if (this.inFlight < runtime.concurrency) return runtime.whenReady();
    return new Promise((resolve) => this.slotWaiters.push(() => resolve('freed')));
  }

  /**
   * With the consumer's `batch` option: slots for up to `batchSize - 1` more records of
   * the partition after `from`, taken only while free (never waited for), so a partition's
   * records run in one transaction. Stops at a record `offsets` mode would skip.
   */
  private reserveMore(
    messages: KafkaMessage[],
    from: number,
    storedNext: bigint | undefined,
  ): KafkaMessage[] {
    const runtime = this.runtime!;
    const more: KafkaMessage[] = [];
    if (runtime.batchSize === undefined) return more;
    for (let i = from; i < messages.length && more.length < runtime.batchSize - 1; i++) {
      if (this.inFlight >= runtime.concurrency) break;
      const message = messages[i]!;
      if (storedNext !== undefined && BigInt(message.offset) < storedNext) break;
      this.inFlight++;
      more.push(message);
    }
    return more;
  }

  /** Resolved records never come back to this member: their dead-letter marks can go. */
  private forgetDeadLetters(partition: number, next: bigint): void {
    const written = this.deadLettered.get(partition);
    if (!written) return;
    for (const offset of written) if (offset < next) written.delete(offset);
    if (written.size === 0) this.deadLettered.delete(partition);
  }

  private freeSlots(count: number): void {
    this.inFlight -= count;
    this.wakeSlotWaiters();
  }

  /**
   * `work`'s result, or undefined as soon as close() abandons the handlers still running.
   * Not `Promise.race([work, abandoned])` with one promise that lives as long as the
   * adapter: every race leaves a reaction on that promise until it settles, two live
   * promises per record for the consumer's whole life (conformance scenario 18).
   */
  private unlessAbandoned<T>(work: Promise<T>): Promise<T | undefined> {
    if (this.abandoned) {
      // Nobody waits for it any more: its failure must not become an unhandled rejection.
      work.catch(() => {});
      return Promise.resolve(undefined);
    }
    return new Promise<T | undefined>((resolve, reject) => {
      const giveUp = () => resolve(undefined);
      this.abandonWaiters.add(giveUp);
      work.then(
        (value) => {
          this.abandonWaiters.delete(giveUp);
          resolve(value);
        },
        (error: unknown) => {
          this.abandonWaiters.delete(giveUp);
          reject(error);
        },
      );
    });
  }

  /** close() gave up waiting: every running wait of `unlessAbandoned` ends now. */
  private abandon(): void {
    this.abandoned = true;
    for (const giveUp of this.abandonWaiters) giveUp();
    this.abandonWaiters.clear();
  }

  private wakeSlotWaiters(): void {
    for (const wake of this.slotWaiters.splice(0)) wake();
  }

  private async deliver(
    batch: Batch,
    message: KafkaMessage,
    payload: EachBatchPayload,
    generation: Generation,
  ): Promise<Settlement> {
    const { delivery, settlement } = this.toDelivery(batch, message, payload, generation);
    // close() abandons a handler that outlives its wait: the record stays uncommitted.
    await this.unlessAbandoned(this.runtime!.dispatch(delivery));
    return settlement();
  }

  /**
   * Records of one partition, in offset order, as one batch of the core: one transaction
   * for all of them; what follows a failed record is released (not committed before it).
   */
  private async deliverInOrder(
    batch: Batch,
    messages: KafkaMessage[],
    payload: EachBatchPayload,
    generation: Generation,
  ): Promise<Settlement[]> {
    const deliveries = messages.map((message) => this.toDelivery(batch, message, payload, generation));
    await this.unlessAbandoned(this.runtime!.dispatchInOrder!(deliveries.map(({ delivery }) => delivery)));
    return deliveries.map(({ settlement }) => settlement());
  }

  /**
   * A record as a Delivery. `settlement()` closes it: a settle call after that (a handler
   * close() abandoned) changes nothing, and an unsettled record is `unsettled`.
   */
  private toDelivery(
    batch: Batch,
    message: KafkaMessage,
    payload: EachBatchPayload,
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
      deadLetter: async (reason, detail) => {
        const offset = BigInt(message.offset);
        if (!this.deadLettered.get(batch.partition)?.has(offset)) {
          await this.publishDeadLetter(batch, message, reason, detail);
          const written = this.deadLettered.get(batch.partition) ?? new Set<bigint>();
          this.deadLettered.set(batch.partition, written.add(offset));
        }
        settle({ kind: 'done' });
      },
      release: async () => settle({ kind: 'release' }),
      extendLease: async () => this.extendLease(payload, generation),
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

  private async publishDeadLetter(
    batch: Batch,
    message: KafkaMessage,
    reason: DeadLetterReason,
    detail: string,
  ): Promise<void> {
    const record = deadLetterRecord({
      topic: batch.topic,
      partition: batch.partition,
      message,
      consumer: this.consumerName,
      reason,
      detail,
    });
    const produce = (messages: Message[]) =>
      this.producer!.send({ topic: this.config.deadLetterTopic, acks: -1, messages });
    try {
      await produce([record]);
    } catch (error) {
      if (!isTooLarge(error)) throw error;
      // The dead-letter topic refuses the record (its max.message.bytes is below the
      // source topic's): it would be refused on every redelivery too, and the partition
      // would never move. Keep the evidence that fits: first without the value, then
      // with Oncely's headers only. The original stays readable at its offset until the
      // source topic's retention removes it.
      const size = message.value?.length ?? 0;
      const note = `MESSAGE_TOO_LARGE: the ${size}-byte value was left out; read it at ${batch.topic}/${batch.partition}/${message.offset}`;
      const withoutValue: Message = {
        ...record,
        value: null,
        headers: { ...record.headers, [DEAD_LETTER_HEADERS.valueDropped]: note },
      };
      this.runtime?.reportError(
        error,
        `dead letter too large for '${this.config.deadLetterTopic}'; writing it without its value`,
      );
      try {
        await produce([withoutValue]);
      } catch (again) {
        if (!isTooLarge(again)) throw again;
        const ours = Object.fromEntries(
          Object.entries(withoutValue.headers ?? {}).filter(
            ([name]) => name === MESSAGE_ID_HEADER || name.startsWith('oncely-'),
          ),
        );
        await produce([{ ...withoutValue, headers: ours }]);
      }
    }
  }

  // ------------------------------------------------------------------------------------
  // Group membership: heartbeats are this broker's lease
  // ------------------------------------------------------------------------------------

  /** The lease keeper's renewal: a heartbeat. Rejects with LeaseLostError once the member is out. */
  private async extendLease(payload: EachBatchPayload, generation: Generation): Promise<void> {
    if (generation.lost !== undefined) throw lostError(generation.lost);
    try {
      await payload.heartbeat();
    } catch (error) {
      const kind = classifyGroupError(error);
      if (kind === 'lost') {
        generation.lost = error;
        throw lostError(error);
      }
      if (kind === 'rebalancing') {
        // The member may keep its partitions; it must rejoin within rebalanceTimeout,
        // which it does once this batch returns. A later heartbeat reports 'lost' if not.
        generation.rebalancing = error;
        return;
      }
      throw error;
    }
  }

  /** Heartbeat between records; records group errors instead of throwing. */
  private async heartbeat(payload: EachBatchPayload, generation: Generation): Promise<void> {
    try {
      await this.extendLease(payload, generation);
    } catch (error) {
      if (generation.lost === undefined) this.runtime!.reportError(error, 'heartbeat failed');
    }
  }

  /**
   * Before marking a record done, make sure this member still belongs to the group when
   * it may have been silent for a whole session (renewal off, long stall): a settle on a
   * lost membership is reported as a failed ack (`LeaseLostError`), never committed.
   */
  private async confirmMembership(payload: EachBatchPayload, generation: Generation): Promise<void> {
    if (generation.lost !== undefined) throw lostError(generation.lost);
    if (Date.now() - this.lastHeartbeatAt < this.config.sessionTimeout) return;
    try {
      await this.extendLease(payload, generation);
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
      await this.consumer!.commitOffsets([{ topic: this.config.topic, partition, offset: next.toString() }]);
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

/**
 * Group errors by what they mean for the records this member holds.
 * `REBALANCE_IN_PROGRESS` / `NOT_COORDINATOR*`: rejoin, partitions may stay.
 * `UNKNOWN_MEMBER_ID` / `ILLEGAL_GENERATION` / `FENCED_INSTANCE_ID`: the generation is
 * over without us; the partitions may already belong to another member.
 */
function classifyGroupError(error: unknown): 'rebalancing' | 'lost' | 'other' {
  const type = (error as { type?: unknown } | null)?.type;
  switch (type) {
    case 'REBALANCE_IN_PROGRESS':
    case 'NOT_COORDINATOR_FOR_GROUP':
    case 'NOT_COORDINATOR':
      return 'rebalancing';
    case 'UNKNOWN_MEMBER_ID':
    case 'ILLEGAL_GENERATION':
    case 'FENCED_INSTANCE_ID':
      return 'lost';
    default:
      return 'other';
  }
}

/** The broker refused a record as larger than the topic's `max.message.bytes`. */
function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = e.cause as typeof e;
  }
  return false;
}

function lostError(cause: unknown): LeaseLostError {
  return new LeaseLostError(
    'this member is no longer in the consumer group; its partitions may be reassigned',
    {
      cause,
    },
  );
}

async function waitAtMost(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
