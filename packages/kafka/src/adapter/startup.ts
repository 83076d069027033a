/** What the Kafka adapter checks at start: the topic it reads and the dead-letter topic it writes. */
import type { ResolvedKafkaConfig } from '../config.js';
import { KafkaTopicMissingError } from '../errors.js';
import type { ClusterAdmin } from './clientApi.js';

/** The number of partitions of `topic`; KafkaTopicMissingError when it does not exist. */
export function topicPartitionCount(admin: ClusterAdmin, topic: string): Promise<number> {
  return admin.topicPartitionCount(topic);
}

/** Creates the dead-letter topic when it is missing and `createDeadLetterTopic` allows it. */
export async function ensureDeadLetterTopic(
  admin: ClusterAdmin,
  config: ResolvedKafkaConfig,
  partitions: number,
): Promise<void> {
  const { deadLetterTopic, createDeadLetterTopic } = config;
  if (await admin.topicExists(deadLetterTopic)) return;
  if (!createDeadLetterTopic) {
    throw new KafkaTopicMissingError(
      deadLetterTopic,
      `dead-letter topic '${deadLetterTopic}' does not exist; create it or set broker.createDeadLetterTopic`,
    );
  }
  try {
    await admin.createTopic(deadLetterTopic, Math.max(1, partitions));
  } catch (error) {
    throw new KafkaTopicMissingError(
      deadLetterTopic,
      `dead-letter topic '${deadLetterTopic}' does not exist and could not be created: create it or set broker.createDeadLetterTopic`,
      { cause: error },
    );
  }
}
