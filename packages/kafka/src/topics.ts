import type { Admin, ITopicConfig } from 'kafkajs';

/**
 * An `Admin` of @platformatic/kafka, as `createTopics` takes it (only its shape is named
 * here, so that kafkajs users need not have @platformatic/kafka's types).
 */
export interface PlatformaticAdminLike {
  createTopics(options: never): unknown;
  metadata(options: never): unknown;
}

/** Errors a metadata request answers while a new topic is still spreading through the cluster. */
const NOT_YET_KNOWN = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE']);

/**
 * Options of `createTopics`.
 *
 * @example
 * ```ts
 * await createTopics(admin, [{ topic: 'payments', numPartitions: 3 }], { timeoutMs: 60_000 });
 * ```
 */
export interface CreateTopicsOptions {
  /** How long to wait for every partition of the new topics to have a leader. Default 30000. */
  timeoutMs?: number;
}

/**
 * Creates topics and waits until every partition has a leader.
 *
 * Why not `admin.createTopics({ waitForLeaders: true })`: kafkajs retries its metadata
 * request only on LEADER_NOT_AVAILABLE, but a KRaft broker answers a topic it created a
 * moment ago with UNKNOWN_TOPIC_OR_PARTITION until it has applied the metadata record, and
 * kafkajs then throws "This server does not host this topic-partition" for a topic that
 * exists. This waits through both answers.
 *
 * Returns false when every topic already existed (as kafkajs does); a topic another
 * process created at the same moment counts as existing.
 *
 * `admin` is a connected kafkajs `Admin` or a @platformatic/kafka `Admin` (then kafkajs is
 * not loaded; `numPartitions`, `replicationFactor` and `configEntries` are passed on).
 */
export async function createTopics(
  admin: Admin | PlatformaticAdminLike,
  topics: ITopicConfig[],
  options: CreateTopicsOptions = {},
): Promise<boolean> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  if (typeof (admin as { fetchTopicMetadata?: unknown }).fetchTopicMetadata !== 'function') {
    const { platformaticCreateTopics } = await import('./adapter/platformaticTopics.js');
    return platformaticCreateTopics(admin as never, topics, timeoutMs);
  }
  return kafkajsCreateTopics(admin as Admin, topics, timeoutMs);
}

async function kafkajsCreateTopics(
  admin: Admin,
  topics: ITopicConfig[],
  timeoutMs: number,
): Promise<boolean> {
  let created: boolean;
  try {
    created = await admin.createTopics({ topics, waitForLeaders: false });
  } catch (error) {
    if ((error as { type?: string }).type !== 'TOPIC_ALREADY_EXISTS') throw error;
    created = false;
  }
  const names = topics.map((topic) => topic.topic);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let lastProblem: unknown;
    try {
      const { topics: described } = await admin.fetchTopicMetadata({ topics: names });
      const leaderless = described.filter(
        (topic) => topic.partitions.length === 0 || topic.partitions.some((p) => p.leader < 0),
      );
      if (leaderless.length === 0) return created;
      lastProblem = `no leader yet for ${leaderless.map((topic) => topic.name).join(', ')}`;
    } catch (error) {
      if (!NOT_YET_KNOWN.has((error as { type?: string }).type ?? '')) throw error;
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
