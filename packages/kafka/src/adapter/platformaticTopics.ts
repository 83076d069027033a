/**
 * Creating topics on @platformatic/kafka: `createTopics` with a platformatic `Admin`, and
 * the adapter's dead-letter topic. Loads nothing of @platformatic/kafka itself.
 */
import type { Admin } from '@platformatic/kafka';
import type { ITopicConfig } from 'kafkajs';
import { kafkaErrorName } from './platformaticOptions.js';

/** Errors a metadata request answers while a new topic is still spreading through the cluster. */
const NOT_YET_KNOWN = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE']);

/**
 * Creates each topic (one request each: a topic that exists, created meanwhile by someone
 * else too, fails only its own) and waits until every partition has a leader. Resolves
 * false when every topic already existed, as kafkajs' createTopics does.
 */
export async function platformaticCreateTopics(
  admin: Admin,
  topics: ITopicConfig[],
  timeoutMs: number,
): Promise<boolean> {
  let created = false;
  for (const topic of topics) {
    try {
      await admin.createTopics({
        topics: [topic.topic],
        partitions: topic.numPartitions ?? -1,
        replicas: topic.replicationFactor ?? -1,
        ...(topic.configEntries?.length
          ? { configs: topic.configEntries.map(({ name, value }) => ({ name, value })) }
          : {}),
      });
      created = true;
    } catch (error) {
      if (kafkaErrorName(error) !== 'TOPIC_ALREADY_EXISTS') throw error;
    }
  }
  const names = topics.map((topic) => topic.topic);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let lastProblem: unknown;
    try {
      const metadata = await admin.metadata({ topics: names, forceUpdate: true });
      const leaderless = names.filter((name) => {
        const topic = metadata.topics.get(name);
        return !topic || topic.partitionsCount === 0 || topic.partitions.some((p) => p.leader < 0);
      });
      if (leaderless.length === 0) return created;
      lastProblem = `no leader yet for ${leaderless.join(', ')}`;
    } catch (error) {
      if (!NOT_YET_KNOWN.has(kafkaErrorName(error) ?? '')) throw error;
      lastProblem = error;
    }
    if (Date.now() >= deadline) {
      throw new Error(`topics ${names.join(', ')} have no leader after ${timeoutMs} ms`, {
        cause: lastProblem,
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
