/**
 * The adapter's client interface on kafkajs 2.2.x: `eachBatch` with
 * `eachBatchAutoResolve: false` and `autoCommit: false`, GROUP_JOIN as the assignment
 * hook, heartbeats only when the adapter asks.
 */
import type { Admin, Kafka as KafkaClient, Consumer as KafkaConsumer, Producer } from 'kafkajs';
import { buildKafkaClient } from '../client.js';
import { KafkaTopicMissingError } from '../errors.js';
import { kafkajsModule } from '../kafkajsModule.js';
import { kafkaLogCreator } from '../kafkaLogger.js';
import { createTopics } from '../topics.js';
import type {
  ClientContext,
  ClusterAdmin,
  GroupConsumer,
  GroupConsumerHandlers,
  KafkaClientDriver,
  RecordProducer,
  RecordProducerOptions,
} from './clientApi.js';
import { kafkajsRecordProducer } from './kafkajsProducer.js';
import { kafkajsScanTopic } from './kafkajsScan.js';

export function kafkajsDriver(context: ClientContext): KafkaClientDriver {
  const { config } = context;
  const kafka =
    (config.kafka as KafkaClient | undefined) ??
    buildKafkaClient(config, { logCreator: kafkaLogCreator(context.log) });
  return {
    name: 'kafkajs',
    consumer: () => new KafkajsGroupConsumer(kafka, context),
    producer: (options) => kafkajsProducer(kafka, context, options),
    admin: () => kafkajsAdmin(kafka.admin()),
    scanTopic: (scan) => kafkajsScanTopic(kafka, scan),
  };
}

class KafkajsGroupConsumer implements GroupConsumer {
  private consumer: KafkaConsumer | undefined;

  constructor(
    private readonly kafka: KafkaClient,
    private readonly context: ClientContext,
  ) {}

  async run(handlers: GroupConsumerHandlers): Promise<void> {
    const { config } = this.context;
    const consumer = this.kafka.consumer({
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
    // kafkajs has no rebalance listener; GROUP_JOIN (emitted synchronously after
    // SyncGroup, before the first fetch) is the nearest hook.
    consumer.on(consumer.events.GROUP_JOIN, (event) =>
      handlers.onAssigned(event.payload.memberAssignment[config.topic] ?? []),
    );
    consumer.on(consumer.events.HEARTBEAT, () => handlers.onHeartbeat());
    consumer.on(consumer.events.CRASH, (event) =>
      handlers.onCrash(event.payload.error, event.payload.restart),
    );
    this.consumer = consumer;
    await consumer.connect();
    await consumer.subscribe({ topics: [config.topic], fromBeginning: config.fromBeginning });
    await consumer.run({
      autoCommit: false,
      // kafkajs would otherwise resolve batch.lastOffset() whenever eachBatch returns,
      // committing records that never ran.
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: config.partitionsConsumedConcurrently ?? this.context.concurrency,
      eachBatch: (payload) => handlers.eachBatch(payload),
    });
  }

  pauseAll(): void {
    try {
      this.consumer?.pause([{ topic: this.context.config.topic }]);
    } catch (error) {
      // kafkajs throws when the consumer is not running (crashed, being rebuilt): nothing fetches then.
      this.context.log.debug('kafka: pausing on stop failed', { error });
    }
  }

  async commit(partition: number, next: bigint): Promise<void> {
    await this.consumer!.commitOffsets([
      { topic: this.context.config.topic, partition, offset: next.toString() },
    ]);
  }

  seek(partition: number, offset: string): void {
    this.consumer?.seek({ topic: this.context.config.topic, partition, offset });
  }

  async disconnect(): Promise<void> {
    // disconnect() leaves the group (LeaveGroup), so the partitions move at once.
    await this.consumer?.disconnect();
  }
}

function kafkajsProducer(
  kafka: KafkaClient,
  context: ClientContext,
  options: RecordProducerOptions = {},
): RecordProducer {
  // Idempotent: a retried send after a lost acknowledgement does not write the record twice.
  const producer: Producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: options.allowAutoTopicCreation ?? false,
    // kafkajs refuses an idempotent producer without retries (broker.retry.retries: 0).
    ...(context.config.retry?.retries === 0 ? { retry: { retries: 1 } } : {}),
  });
  return kafkajsRecordProducer(producer);
}

function kafkajsAdmin(admin: Admin): ClusterAdmin {
  return {
    connect: () => admin.connect(),
    async topicPartitionCount(topic) {
      try {
        const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
        return metadata.topics[0]?.partitions.length ?? 0;
      } catch (error) {
        if ((error as { type?: string }).type === 'UNKNOWN_TOPIC_OR_PARTITION') {
          throw new KafkaTopicMissingError(topic, `Kafka topic '${topic}' does not exist (broker.topic)`, {
            cause: error,
          });
        }
        throw error;
      }
    },
    topicExists: async (topic) => (await admin.listTopics()).includes(topic),
    async createTopic(topic, partitions) {
      // createTopics counts a topic another consumer of the group created at the same
      // moment as existing.
      await createTopics(admin, [{ topic, numPartitions: partitions }]);
    },
    async committedOffsets(groupId, topic) {
      const committed = await retryingRetriable(() => admin.fetchOffsets({ groupId, topics: [topic] }));
      return new Map(committed[0]?.partitions.map((p) => [p.partition, BigInt(p.offset)]) ?? []);
    },
    async maxMessageBytes(topic) {
      const { resources } = await admin.describeConfigs({
        resources: [
          {
            type: kafkajsModule().ConfigResourceTypes.TOPIC,
            name: topic,
            configNames: ['max.message.bytes'],
          },
        ],
        includeSynonyms: false,
      });
      return Number(
        resources[0]?.configEntries.find((e) => e.configName === 'max.message.bytes')?.configValue,
      );
    },
    async topicConfigs(topic, names) {
      const { resources } = await admin.describeConfigs({
        resources: [{ type: kafkajsModule().ConfigResourceTypes.TOPIC, name: topic, configNames: names }],
        includeSynonyms: false,
      });
      const configs = new Map<string, string>();
      for (const entry of resources[0]?.configEntries ?? []) {
        if (entry.configValue !== null && entry.configValue !== undefined)
          configs.set(entry.configName, entry.configValue);
      }
      return configs;
    },
    async describeCluster() {
      const cluster = await admin.describeCluster();
      return { brokers: cluster.brokers.length, controller: cluster.controller };
    },
    async partitionOffsets(topic) {
      return (await retryingRetriable(() => admin.fetchTopicOffsets(topic))).map(
        ({ partition, low, high }) => ({
          partition,
          low: BigInt(low),
          high: BigInt(high),
        }),
      );
    },
    async groupState(groupId) {
      const group = (await admin.describeGroups([groupId])).groups[0];
      return group && group.state !== 'Dead'
        ? { state: group.state, members: group.members.length }
        : undefined;
    },
    deleteGroup: async (groupId) => {
      await admin.deleteGroups([groupId]);
    },
    disconnect: () => admin.disconnect(),
  };
}

/** Pauses between the attempts of {@link retryingRetriable}: about 3 s in all. */
const RETRIABLE_PAUSES_MS = [100, 200, 400, 800, 1600];

/**
 * `read()`, made again after an error kafkajs marks `retriable`. kafkajs' admin does not
 * retry a partition's NOT_LEADER_FOR_PARTITION or LEADER_NOT_AVAILABLE from ListOffsets and
 * OffsetFetch: a topic created a moment before, or any leader election, failed diagnose()
 * (`oncely doctor`) and the dead-letter passes with "cluster did not answer". Any other
 * error, or the last attempt's, is thrown as it is.
 */
async function retryingRetriable<T>(read: () => Promise<T>): Promise<T> {
  for (const pauseMs of RETRIABLE_PAUSES_MS) {
    try {
      return await read();
    } catch (error) {
      if ((error as { retriable?: unknown } | null)?.retriable !== true) throw error;
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  }
  return read();
}
