/**
 * The one small interface between the Kafka adapter and a Kafka client library: what
 * the adapter needs of a group consumer, a dead-letter producer and an admin, and
 * nothing else. `kafkajsClient.ts` and `platformaticClient.ts` implement it; a third
 * client (Confluent's) is one more file of the same shape.
 *
 * Records cross it in kafkajs' record shape (`KafkaMessage`: offsets as decimal strings,
 * headers as an object of Buffers), whatever the client: it is what `message.raw` has
 * always held, and what the envelope and dead-letter code read.
 */
import { type Logger, OncelyError } from '@oncely/core';
import type { KafkaMessage, Message, RecordMetadata } from 'kafkajs';
import type { ResolvedKafkaConfig } from '../config.js';

/** A consumed record (kafkajs' shape; a type only, kafkajs is not loaded for it). */
export type KafkaRecord = KafkaMessage;
/** A record to produce (kafkajs' shape). */
export type OutgoingRecord = Message;

/**
 * Records of one partition handed to the adapter, in offset order, and what the adapter
 * may do while it works through them. kafkajs' `EachBatchPayload` has this shape.
 */
export interface ClientBatch {
  readonly batch: { readonly topic: string; readonly partition: number; readonly messages: KafkaRecord[] };
  /** Marks the records up to `offset` done: they are not handed over again by this run. */
  resolveOffset(offset: string): void;
  /**
   * Proves membership. Rejects with an error whose `type` is the Kafka error name
   * (`REBALANCE_IN_PROGRESS`, `UNKNOWN_MEMBER_ID`, ...) when the group says so.
   */
  heartbeat(): Promise<void>;
  /** Stops fetching this partition; the function returned resumes it. */
  pause(): () => void;
  /** The group moved on since this batch was fetched. */
  isStale(): boolean;
  /** The consumer still runs. */
  isRunning(): boolean;
}

/** What the adapter hears from a running group consumer. */
export interface GroupConsumerHandlers {
  /** A new generation: the partitions of the topic this member now owns. */
  onAssigned(partitions: number[]): void;
  /** A heartbeat reached the coordinator. */
  onHeartbeat(): void;
  /** The consumer failed; `restart`: the client restarts it by itself. */
  onCrash(error: Error, restart: boolean): void;
  /** Records of one partition; a rejection is taken as a group error to rejoin on. */
  eachBatch(batch: ClientBatch): Promise<void>;
}

/** A group consumer of one topic, manual commits only. */
export interface GroupConsumer {
  /** Connects, joins the group and starts handing over batches. */
  run(handlers: GroupConsumerHandlers): Promise<void>;
  /** Stops fetching every partition (stop()); never throws. */
  pauseAll(): void;
  /** Commits `next` as the group's offset of `partition`. */
  commit(partition: number, next: bigint): Promise<void>;
  /** Fetches `partition` from `offset` next (offsets mode); may be a no-op where the adapter skips instead. */
  seek(partition: number, offset: string): void;
  /** Leaves the group and closes the connections. */
  disconnect(): Promise<void>;
}

/**
 * Writes records with acks from every in-sync replica: dead letters, `send()` and the
 * outbox producer. A record's partition is its `partition`, else Kafka's Java (murmur2)
 * partitioner of its key on every client, so a key keeps its partition (and its order)
 * whichever client wrote it. Rejects with an error whose `type` is the Kafka error name
 * (`MESSAGE_TOO_LARGE`, ...) and whose `retriable` says whether a retry may succeed.
 */
export interface RecordProducer {
  connect(): Promise<void>;
  /** `timeoutMs`: how long the broker may wait for the in-sync replicas. */
  send(topic: string, records: OutgoingRecord[], options?: { timeoutMs?: number }): Promise<SentRecord[]>;
  disconnect(): Promise<void>;
}

/** Where records went (kafkajs' `RecordMetadata`: one entry per partition written). */
export type SentRecord = RecordMetadata;

/** Writes dead letters (idempotent). */
export type DeadLetterProducer = RecordProducer;

/** How a driver's own producer is made. */
export interface RecordProducerOptions {
  /** Let the broker create a topic a record is sent to (when it allows that). @default false */
  allowAutoTopicCreation?: boolean;
}

/** The admin calls the adapter makes at start and at assignment. */
export interface ClusterAdmin {
  connect(): Promise<void>;
  /** Partition count of `topic`; rejects with KafkaTopicMissingError when it does not exist. */
  topicPartitionCount(topic: string): Promise<number>;
  topicExists(topic: string): Promise<boolean>;
  /** Creates `topic` (a topic created meanwhile by someone else counts) and waits for its leaders. */
  createTopic(topic: string, partitions: number): Promise<void>;
  /** The group's committed next offsets of `topic` (absent: none). */
  committedOffsets(groupId: string, topic: string): Promise<Map<number, bigint>>;
  /** The topic's `max.message.bytes`; rejects when it cannot be read (a missing topic, no Describe permission). */
  maxMessageBytes(topic: string): Promise<number>;
  /** The topic's configs named (as the broker reports them; absent: not reported). */
  topicConfigs(topic: string, names: string[]): Promise<Map<string, string>>;
  /** How many brokers answer, and the controller's ID (`oncely doctor`). */
  describeCluster(): Promise<{ brokers: number; controller: number | null }>;
  /** Each partition's first and next offset (log start and high watermark). */
  partitionOffsets(topic: string): Promise<Array<{ partition: number; low: bigint; high: bigint }>>;
  /** The group's state in kafkajs' spelling (`Stable`, `Empty`, ...) and member count; undefined when it is dead or unknown. */
  groupState(groupId: string): Promise<{ state: string; members: number } | undefined>;
  /** Deletes an empty group. */
  deleteGroup(groupId: string): Promise<void>;
  disconnect(): Promise<void>;
}

/** What {@link KafkaClientDriver.scanTopic} reads. */
export interface TopicScan {
  topic: string;
  /** A throwaway group of the scan's own: it commits nothing. */
  groupId: string;
  /** Each partition to read and the offset to stop before (partitions not named are not read). */
  ends: Map<number, bigint>;
  /**
   * Where to begin per partition (others: at the first offset). Records below are never
   * visited; a client may still fetch them (kafkajs seeks, @platformatic/kafka skips them).
   */
  starts?: Map<number, bigint>;
  /** Called with each record below its partition's end, in offset order per partition; `true` stops the scan. */
  visit(record: KafkaRecord, partition: number): boolean | undefined;
  /** The scan rejects with an error naming the topic after this long. */
  timeoutMs: number;
}

/** What the adapter builds its three clients with. */
export interface ClientContext {
  config: ResolvedKafkaConfig;
  /** The runtime's logger: the client's own log lines go there. */
  log: Logger;
  /** The consumer's concurrency (kafkajs' partitionsConsumedConcurrently default). */
  concurrency: number;
}

/** One Kafka client library behind the adapter. */
export interface KafkaClientDriver {
  /** 'kafkajs' | 'platformatic': for logs and errors. */
  readonly name: string;
  consumer(): GroupConsumer;
  /** An idempotent producer of its own (connect() before use, disconnect() after). */
  producer(options?: RecordProducerOptions): RecordProducer;
  admin(): ClusterAdmin;
  /** Reads records from each partition's start up to its end without consuming them, then closes its consumer. */
  scanTopic(scan: TopicScan): Promise<void>;
}

/** The error a scan that ran out of time rejects with (the same on every client). */
export function scanTimeout(scan: TopicScan): Error {
  return new OncelyError(
    'BROKER_UNREACHABLE',
    `reading dead-letter topic '${scan.topic}' took longer than ${scan.timeoutMs / 1000} s`,
  );
}

/** An error carrying the Kafka error name in `type`, as kafkajs' errors do. */
export function kafkaTypedError(type: string, cause: unknown): Error & { type: string } {
  const error = new Error(`${type}: ${(cause as Error | undefined)?.message ?? String(cause)}`, {
    cause,
  }) as Error & { type: string };
  error.type = type;
  return error;
}

/**
 * The error of a record sent to a partition its topic does not have: not retriable, the
 * same on every client (kafkajs would drop the record without a word, @platformatic/kafka
 * write it to another partition).
 */
export function missingPartitionError(topic: string, partition: number, partitions?: number): Error {
  const has = partitions === undefined ? '' : ` (it has ${partitions}: 0 to ${partitions - 1})`;
  return Object.assign(
    kafkaTypedError('UNKNOWN_TOPIC_OR_PARTITION', `topic '${topic}' has no partition ${partition}${has}`),
    { retriable: false },
  );
}
