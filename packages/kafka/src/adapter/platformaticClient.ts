/**
 * The adapter's client interface on `@platformatic/kafka` (2.12.x, Node >= 22.22).
 *
 * That client hands records over as one stream for all partitions, heartbeats in the
 * background, and has neither a per-partition pause nor a seek on a running stream.
 * So this file keeps a queue of records per partition and runs each queue in offset
 * order as kafkajs' `eachBatch` would:
 * - a record that is not done stays at the head of its queue and is handed over again
 *   (after the retry backoff: `pause()` holds only this queue), instead of being fetched again;
 * - the stream as a whole pauses while the queues hold more than MAX_BUFFERED records
 *   (a partition held by a long backoff holds the others' fetching then too);
 * - `seek()` is a no-op: in `offsets` mode the adapter skips the records below the
 *   stored offset itself;
 * - a new generation (`consumer:group:join`) drops every queue: the stream fetches again
 *   from the group's committed offsets, which never pass a record that is not done;
 * - the lease: its heartbeats run on a timer whatever the handlers do, so a member whose
 *   handler hangs would keep its partitions for ever. The adapter's heartbeat() calls
 *   (the lease keeper's, and between records) are the lease here: when a batch runs and
 *   none came for a whole session, this member leaves the group (its partitions move, as
 *   they do when kafkajs stops heartbeating) and joins again once its batches ended.
 */
import {
  ConfigResourceTypes,
  type Consumer,
  ListOffsetTimestamps,
  type Message,
  type MessagesStream,
} from '@platformatic/kafka';
import type { ResolvedKafkaConfig } from '../config.js';
import { KafkaTopicMissingError } from '../errors.js';
import {
  type ClientBatch,
  type ClientContext,
  type ClusterAdmin,
  type GroupConsumer,
  type GroupConsumerHandlers,
  type KafkaClientDriver,
  type KafkaRecord,
  kafkaTypedError,
} from './clientApi.js';
import { newAdmin, newConsumer } from './platformaticFactories.js';
import { baseOptions, kafkaErrorName, toKafkaRecord, typed } from './platformaticOptions.js';
import { ownPlatformaticProducer } from './platformaticProducer.js';
import { platformaticScanTopic } from './platformaticScan.js';
import { platformaticCreateTopics } from './platformaticTopics.js';

/** Above this many records held in the queues, the stream stops fetching until half are done. */
const MAX_BUFFERED = 2000;
/** A queue that made no progress (the core released its head, or the group is rebalancing) waits this long. */
const IDLE_RETRY_MS = 50;
/** Group errors after which this member must rejoin or has lost its partitions. */
const GROUP_ERRORS = new Set([
  'REBALANCE_IN_PROGRESS',
  'UNKNOWN_MEMBER_ID',
  'ILLEGAL_GENERATION',
  'FENCED_INSTANCE_ID',
  'NOT_COORDINATOR',
]);

export function platformaticDriver(context: ClientContext): KafkaClientDriver {
  return {
    name: '@platformatic/kafka',
    consumer: () => new PlatformaticGroupConsumer(context),
    producer: (options) => ownPlatformaticProducer(context.config, options),
    admin: () => platformaticAdmin(context.config),
    scanTopic: (scan) => platformaticScanTopic(context.config, scan),
  };
}

/** One partition's records not done yet, in offset order. */
interface PartitionQueue {
  /** Where the stream was told to start this partition in this generation ('offsets' event). */
  start: bigint | undefined;
  /** The stream's fetch count when the start was enforced (see onRecord); undefined: not yet. */
  enforcedAtFetch: number | undefined;
  records: KafkaRecord[];
  /** Next offset expected: a record below it is a duplicate of one already queued. */
  next: bigint | undefined;
  leaderEpoch: number;
  /** The adapter paused it (retry backoff). */
  paused: boolean;
  running: boolean;
  /** The run of the adapter's batches on this queue, while `running`. */
  run: Promise<void> | undefined;
}

class PlatformaticGroupConsumer implements GroupConsumer {
  private consumer: Consumer | undefined;
  private stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
  private handlers: GroupConsumerHandlers | undefined;
  private generation = 0;
  private assigned = new Set<number>();
  private queues = new Map<number, PartitionQueue>();
  private buffered = 0;
  private streamPaused = false;
  /** Runs of the last generation's queues that had not ended at the join, per partition. */
  private readonly endingRuns = new Map<number, Promise<void>>();
  /** Fetch answers the stream has had ('fetch' events). */
  private fetches = 0;
  /**
   * A rejoin of the running stream whose start positions the stream has not read yet
   * ('offsets'): what it hands over meanwhile is of the last generation (see onRecord).
   */
  private awaitingStarts = false;
  private stopped = false;
  /** A heartbeat's group error since the last join: extendLease reports it. */
  private groupError: unknown;
  /** When the adapter last proved this member alive (heartbeat()), ms since epoch. */
  private leaseAt = Date.now();
  /** Batches in the adapter's hands now. */
  private runningBatches = 0;
  /** This member left the group because the adapter stopped heartbeating; rejoins when idle. */
  private leftForLease = false;
  private leaseWatch: NodeJS.Timeout | undefined;
  /** The stream being opened again after a lapsed lease: disconnect() waits for it. */
  private reopening: Promise<void> | undefined;

  constructor(private readonly context: ClientContext) {}

  async run(handlers: GroupConsumerHandlers): Promise<void> {
    const { config } = this.context;
    this.handlers = handlers;
    const consumer = newConsumer(config, {
      ...baseOptions(config, config.clientId),
      groupId: config.groupId,
      sessionTimeout: config.sessionTimeout,
      heartbeatInterval: config.heartbeatInterval,
      rebalanceTimeout: this.rebalanceTimeout(),
    });
    this.consumer = consumer;
    // Registered before consume() joins, and so before the stream's own listener: the
    // queues are dropped before the stream fetches again from the committed offsets.
    consumer.on('consumer:group:join', (payload) => {
      this.generation++;
      this.groupError = undefined;
      this.leaseAt = Date.now();
      this.forgetFetchPositions();
      // The running stream reads its start positions for this generation now (its own join
      // listener, after this one); a stream being opened reads them as it starts.
      this.awaitingStarts = this.stream !== undefined && !this.stream.destroyed;
      // A batch of the last generation may still run (this client rejoins without waiting
      // for it, kafkajs does not): the partition's next queue starts after it, so records
      // of one partition never run side by side.
      this.endingRuns.clear();
      for (const [partition, queue] of this.queues) if (queue.run) this.endingRuns.set(partition, queue.run);
      this.queues.clear();
      this.buffered = 0;
      this.resumeStreamIfDrained();
      const mine = payload.assignments?.find((a) => a.topic === config.topic)?.partitions ?? [];
      this.assigned = new Set(mine);
      handlers.onAssigned([...mine]);
    });
    // A rejoin that failed (after a heartbeat's group error) is emitted as 'error': without
    // a listener that is an uncaught exception, and the member sends no more heartbeats.
    // The adapter builds a new consumer, as after a kafkajs crash it does not restart from.
    consumer.on('error', (error: Error) => {
      if (!this.stopped) handlers.onCrash(error, false);
    });
    // Not 'consumer:heartbeat:end': those run on a timer whatever the handlers do, and
    // the adapter must see the lease it keeps (see heartbeat() in batchOf).
    consumer.on('consumer:heartbeat:error', (payload) => {
      const name = kafkaErrorName(payload.error);
      if (name !== undefined && GROUP_ERRORS.has(name))
        this.groupError = kafkaTypedError(name, payload.error);
    });
    await this.openStream();
    this.leaseWatch = setInterval(() => this.checkLease(), this.context.config.heartbeatInterval);
    this.leaseWatch.unref();
  }

  /** Joins the group (again) and starts handing over its records. */
  private async openStream(): Promise<void> {
    const { config } = this.context;
    const handlers = this.handlers!;
    // A stream closed by a lapsed lease: its records and positions are of no generation.
    this.stream = undefined;
    this.awaitingStarts = false;
    const stream = await this.consumer!.consume({
      topics: [config.topic],
      mode: 'committed',
      fallbackMode: config.fromBeginning ? 'earliest' : 'latest',
      autocommit: false,
      sessionTimeout: config.sessionTimeout,
      heartbeatInterval: config.heartbeatInterval,
      rebalanceTimeout: this.rebalanceTimeout(),
      maxWaitTime: config.maxWaitTimeInMs,
      ...(config.minBytes !== undefined ? { minBytes: config.minBytes } : {}),
      ...(config.maxBytes !== undefined ? { maxBytes: config.maxBytes } : {}),
      ...(config.maxBytesPerPartition !== undefined
        ? { maxBytesPerPartition: config.maxBytesPerPartition }
        : {}),
    });
    this.stream = stream;
    stream.on('offsets', () => this.noteStartPositions());
    stream.on('fetch', () => {
      this.fetches++;
      // A fetch answered between a rejoin and the new start positions moves the stream's
      // positions as its records are pushed (right after this event): forgotten again, so
      // a partition without a committed offset starts at fromBeginning's end, not after them.
      if (this.awaitingStarts) {
        process.nextTick(() => {
          if (this.awaitingStarts) this.forgetFetchPositions();
        });
      }
    });
    stream.on('data', (message) => this.onRecord(message));
    stream.on('error', (error) => {
      if (!this.stopped) handlers.onCrash(error, false);
    });
  }

  /** Leaves the group when a batch runs and the adapter kept no lease for a session. */
  private checkLease(): void {
    const { sessionTimeout, groupId } = this.context.config;
    if (this.stopped || this.leftForLease || this.runningBatches === 0) return;
    if (Date.now() - this.leaseAt < sessionTimeout) return;
    this.leftForLease = true;
    this.groupError = kafkaTypedError(
      'UNKNOWN_MEMBER_ID',
      new Error(
        `no heartbeat from the handlers for ${sessionTimeout} ms (sessionTimeout): left group ${groupId}`,
      ),
    );
    this.assigned = new Set();
    this.queues.clear();
    this.buffered = 0;
    // force: @platformatic/kafka leaves only with its streams closed (force closes them);
    // rejoinIfIdle opens a new one. The first overload (callback style) types as void.
    const left = this.consumer?.leaveGroup(true) as Promise<void> | undefined;
    left?.catch((error: unknown) => {
      this.context.log.warn('kafka: leaving the group after a lapsed lease failed', { error });
    });
  }

  /** After a lapsed lease, joins again once the batches that held it have ended. */
  private rejoinIfIdle(): void {
    if (!this.leftForLease || this.runningBatches > 0 || this.stopped) return;
    this.leftForLease = false;
    this.reopening = this.openStream()
      .catch((error: unknown) => {
        if (!this.stopped) this.handlers?.onCrash(error as Error, false);
      })
      .finally(() => {
        this.reopening = undefined;
      });
  }

  /** @platformatic/kafka refuses a rebalance timeout below the session timeout (Kafka does not). */
  private rebalanceTimeout(): number {
    const { rebalanceTimeout, sessionTimeout } = this.context.config;
    return Math.max(rebalanceTimeout, sessionTimeout);
  }

  private onRecord(message: Message<Buffer, Buffer, Buffer, Buffer>): void {
    if (this.stopped || message.topic !== this.context.config.topic) return;
    // Records of the last generation, handed over after a rejoin but before the stream read
    // the new start positions: what the stream buffered while paused (MAX_BUFFERED), or a
    // fetch answered late. Queued, they would start a partition past the records between
    // its committed offset and them, which the queue then drops as below its next offset:
    // the adapter commits past records that never ran. The stream fetches them again from
    // the start positions.
    if (this.awaitingStarts) return;
    const { partition, offset } = message;
    if (!this.assigned.has(partition)) return;
    let queue = this.queues.get(partition);
    if (!queue) {
      queue = this.newQueue();
      this.queues.set(partition, queue);
    }
    if (queue.next !== undefined && offset < queue.next) return;
    if (queue.next === undefined && queue.start !== undefined && offset > queue.start) {
      // A fetch sent before the rebalance answered after it: the stream moved its position
      // past the start it was given. Back to the start, once, dropping the rest of that
      // answer (a real gap, such as a transaction marker at the start, costs one more fetch).
      if (queue.enforcedAtFetch === undefined) {
        queue.enforcedAtFetch = this.fetches;
        this.stream?.offsetsToFetch.set(this.positionKey(partition), queue.start);
        return;
      }
      if (queue.enforcedAtFetch === this.fetches) return;
    }
    if (queue.start !== undefined && offset < queue.start) return;
    queue.next = offset + 1n;
    queue.leaderEpoch = message.leaderEpoch;
    queue.records.push(toKafkaRecord(message));
    this.buffered++;
    if (this.buffered >= MAX_BUFFERED && !this.streamPaused) {
      this.streamPaused = true;
      this.stream?.pause();
    }
    if (!queue.running && !queue.paused) this.startQueue(partition, queue);
  }

  private newQueue(): PartitionQueue {
    return {
      start: undefined,
      enforcedAtFetch: undefined,
      records: [],
      next: undefined,
      leaderEpoch: -1,
      paused: false,
      running: false,
      run: undefined,
    };
  }

  /** The stream's fetch position of `partition` (its own live map, public as `offsetsToFetch`). */
  private positionKey(partition: number): string {
    return `${this.context.config.topic}:${partition}`;
  }

  /**
   * Before the stream's own join listener: forget its fetch positions of our topic, so it
   * starts each assigned partition at the committed offset, or, where the group has none,
   * at `fromBeginning`'s end of the partition. It keeps a position it had (it only fills in
   * missing ones), and a position from an earlier ownership of the partition may be past
   * records this member never ran: they would be skipped.
   */
  private forgetFetchPositions(): void {
    const positions = this.stream?.offsetsToFetch;
    if (!positions) return;
    const prefix = `${this.context.config.topic}:`;
    for (const key of [...positions.keys()]) if (key.startsWith(prefix)) positions.delete(key);
  }

  /** The stream has its start positions for the generation ('offsets' event). */
  private noteStartPositions(): void {
    this.awaitingStarts = false;
    const positions = this.stream?.offsetsToFetch;
    if (!positions) return;
    for (const partition of this.assigned) {
      const start = positions.get(this.positionKey(partition));
      if (start === undefined) continue;
      const queue = this.queues.get(partition) ?? this.newQueue();
      this.queues.set(partition, queue);
      if (queue.next === undefined) queue.start = start;
    }
  }

  private startQueue(partition: number, queue: PartitionQueue): void {
    queue.running = true;
    queue.run = this.runQueue(partition, queue);
  }

  /** Hands the partition's queue to the adapter until it is empty, paused or gone. */
  private async runQueue(partition: number, queue: PartitionQueue): Promise<void> {
    const generation = this.generation;
    try {
      const ending = this.endingRuns.get(partition);
      if (ending) await ending;
      while (
        !this.stopped &&
        generation === this.generation &&
        this.queues.get(partition) === queue &&
        !queue.paused &&
        queue.records.length > 0
      ) {
        const head = queue.records[0];
        this.runningBatches++;
        if (this.runningBatches === 1) this.leaseAt = Date.now();
        try {
          await this.handlers!.eachBatch(this.batchOf(partition, queue, generation));
        } catch {
          // A group error handed back to rejoin on: this client rejoins by itself.
        } finally {
          this.runningBatches--;
          this.rejoinIfIdle();
        }
        if (queue.records[0] === head && !queue.paused) {
          await new Promise((resolve) => setTimeout(resolve, IDLE_RETRY_MS));
        }
      }
    } finally {
      if (this.endingRuns.get(partition) === queue.run) this.endingRuns.delete(partition);
      queue.running = false;
      queue.run = undefined;
    }
  }

  private batchOf(partition: number, queue: PartitionQueue, generation: number): ClientBatch {
    const { topic } = this.context.config;
    return {
      batch: { topic, partition, messages: queue.records.slice() },
      resolveOffset: (offset) => {
        const done = BigInt(offset);
        let count = 0;
        while (count < queue.records.length && BigInt(queue.records[count]!.offset) <= done) count++;
        if (count === 0) return;
        queue.records.splice(0, count);
        if (this.queues.get(partition) === queue) this.buffered -= count;
        this.resumeStreamIfDrained();
      },
      heartbeat: async () => {
        // Heartbeats run in the background here; a group error one of them got is the answer.
        if (this.groupError !== undefined && (generation === this.generation || this.leftForLease))
          throw this.groupError;
        // The lease is that the handlers live, whichever generation their batch is of: this
        // client rejoins without waiting for them, and a batch of the last generation may run
        // on (a handler slower than the session); not counting it left the group a session
        // after every rejoin and refused its ack.
        this.leaseAt = Date.now();
        if (generation !== this.generation) return;
        this.handlers!.onHeartbeat();
      },
      pause: () => {
        queue.paused = true;
        return () => {
          queue.paused = false;
          if (!queue.running && queue.records.length > 0 && this.queues.get(partition) === queue) {
            this.startQueue(partition, queue);
          }
        };
      },
      isStale: () => generation !== this.generation,
      isRunning: () => !this.stopped,
    };
  }

  private resumeStreamIfDrained(): void {
    if (this.streamPaused && !this.stopped && this.buffered <= MAX_BUFFERED / 2) {
      this.streamPaused = false;
      this.stream?.resume();
    }
  }

  pauseAll(): void {
    this.stopped = true;
    try {
      this.stream?.pause();
    } catch (error) {
      this.context.log.debug('kafka: pausing on stop failed', { error });
    }
  }

  async commit(partition: number, next: bigint): Promise<void> {
    const leaderEpoch = this.queues.get(partition)?.leaderEpoch ?? -1;
    try {
      await this.consumer!.commit({
        offsets: [{ topic: this.context.config.topic, partition, offset: next, leaderEpoch }],
      });
    } catch (error) {
      throw typed(error);
    }
  }

  seek(): void {
    // No seek on a running stream: the adapter skips the records below the stored offset.
  }

  async disconnect(): Promise<void> {
    this.stopped = true;
    clearInterval(this.leaseWatch);
    // Closing the client while it joins fails that join with an error nobody can catch.
    await this.reopening;
    this.queues.clear();
    try {
      await this.stream?.close();
    } finally {
      // close() leaves the group, so the partitions move at once.
      await this.consumer?.close();
    }
  }
}

function platformaticAdmin(config: ResolvedKafkaConfig): ClusterAdmin {
  const admin = newAdmin(config, baseOptions(config, `${config.clientId}-admin`));
  const partitionCount = async (topic: string, forceUpdate = false) => {
    const metadata = await admin.metadata({ topics: [topic], forceUpdate });
    return metadata.topics.get(topic);
  };
  return {
    // Connects on the first request.
    connect: async () => {},
    async topicPartitionCount(topic) {
      try {
        return (await partitionCount(topic))?.partitionsCount ?? 0;
      } catch (error) {
        // Its metadata() reports a missing topic as a UserError ('Unknown topic ...', no
        // Kafka error name), which read as a connection failure: the topic list decides.
        const missing =
          kafkaErrorName(error) === 'UNKNOWN_TOPIC_OR_PARTITION' ||
          !(await admin.listTopics().catch(() => [topic])).includes(topic);
        if (missing) {
          throw new KafkaTopicMissingError(topic, `Kafka topic '${topic}' does not exist (broker.topic)`, {
            cause: error,
          });
        }
        throw error;
      }
    },
    topicExists: async (topic) => (await admin.listTopics()).includes(topic),
    async createTopic(topic, partitions) {
      // A topic created meanwhile by another member counts; waits for its leaders (a KRaft
      // broker answers UNKNOWN_TOPIC_OR_PARTITION for a moment after creating it).
      await platformaticCreateTopics(admin, [{ topic, numPartitions: partitions }], 30_000);
    },
    async committedOffsets(groupId, topic) {
      const [group] = await admin.listConsumerGroupOffsets({ groups: [groupId] });
      const committed = new Map<number, bigint>();
      for (const t of group?.topics ?? []) {
        if (t.name !== topic) continue;
        for (const p of t.partitions) committed.set(p.partitionIndex, p.committedOffset);
      }
      return committed;
    },
    async maxMessageBytes(topic) {
      const [described] = await admin.describeConfigs({
        resources: [
          {
            resourceType: ConfigResourceTypes.TOPIC,
            resourceName: topic,
            configurationKeys: ['max.message.bytes'],
          },
        ],
      });
      return Number(described?.configs.find((c) => c.name === 'max.message.bytes')?.value);
    },
    async topicConfigs(topic, names) {
      const [described] = await admin.describeConfigs({
        resources: [
          { resourceType: ConfigResourceTypes.TOPIC, resourceName: topic, configurationKeys: names },
        ],
      });
      const configs = new Map<string, string>();
      for (const config of described?.configs ?? []) {
        if (config.value !== null && config.value !== undefined) configs.set(config.name, config.value);
      }
      return configs;
    },
    async describeCluster() {
      const metadata = await admin.metadata({ topics: [], forceUpdate: true });
      return { brokers: metadata.brokers.size, controller: metadata.controllerId };
    },
    async partitionOffsets(topic) {
      const count = (await partitionCount(topic, true))?.partitionsCount ?? 0;
      const at = async (timestamp: bigint) => {
        const [listed] = await admin.listOffsets({
          topics: [
            {
              name: topic,
              partitions: Array.from({ length: count }, (_, partitionIndex) => ({
                partitionIndex,
                timestamp,
              })),
            },
          ],
        });
        return new Map(listed?.partitions.map((p) => [p.partitionIndex, p.offset]) ?? []);
      };
      const [low, high] = await Promise.all([
        at(ListOffsetTimestamps.EARLIEST),
        at(ListOffsetTimestamps.LATEST),
      ]);
      return Array.from({ length: count }, (_, partition) => ({
        partition,
        low: low.get(partition) ?? 0n,
        high: high.get(partition) ?? 0n,
      }));
    },
    async groupState(groupId) {
      const group = (await admin.describeGroups({ groups: [groupId] })).get(groupId);
      const state = group === undefined ? undefined : kafkajsGroupState(group.state);
      return group && state !== 'Dead' && state !== 'Unknown'
        ? { state: state!, members: group.members.size }
        : undefined;
    },
    deleteGroup: (groupId) => admin.deleteGroups({ groups: [groupId] }),
    disconnect: () => admin.close(),
  };
}

/** A group state as kafkajs spells it: 'STABLE' or 'Stable' (by protocol version) becomes 'Stable'. */
function kafkajsGroupState(state: string): string {
  if (!/^[A-Z_]+$/.test(state)) return state;
  return state
    .toLowerCase()
    .split('_')
    .map((word) => word.charAt(0).toUpperCase() + word.slice(1))
    .join('');
}
