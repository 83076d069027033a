/** `offsets` mode at assignment: start each partition at the stored next offset. */
import type { AdapterRuntime, Logger } from '@oncely/core';
import type { ResolvedKafkaConfig } from '../config.js';
import type { ClusterAdmin, GroupConsumer } from './clientApi.js';
import type { Generation } from './groupMembership.js';

/** What {@link seekToStoredOffsets} reads from the adapter. */
export interface OffsetSeeker {
  readonly config: ResolvedKafkaConfig;
  readonly runtime: AdapterRuntime;
  readonly admin: ClusterAdmin;
  readonly consumerName: string;
  readonly log: Logger;
  /** The generation now current: a newer assignment makes this seek moot. */
  generation(): Generation;
}

/**
 * `offsets` mode: seek each assigned partition to the stored next offset when it is
 * ahead of the group's committed offset (our Kafka commits trail the store). Never
 * seeks backwards: records dead-lettered or skipped never advanced the stored offset.
 */
export async function seekToStoredOffsets(
  adapter: OffsetSeeker,
  consumer: GroupConsumer,
  generation: Generation,
): Promise<Map<number, string>> {
  const { topic, groupId } = adapter.config;
  try {
    const stored = await adapter.runtime.store.offsets!.read(adapter.consumerName, topic);
    const committedBy = await adapter.admin.committedOffsets(groupId, topic);
    for (const partition of generation.partitions) {
      const next = stored.get(partition);
      if (next === undefined || generation !== adapter.generation()) continue;
      if (BigInt(next) > (committedBy.get(partition) ?? -1n)) {
        consumer.seek(partition, next);
        adapter.log.debug('kafka: seek to stored offset', {
          consumer: adapter.consumerName,
          topic,
          partition,
          offset: next,
        });
      }
    }
    return stored;
  } catch (error) {
    adapter.runtime.reportError(
      error,
      'offsets mode: could not read stored offsets at assignment; records already applied are skipped by the conditional upsert',
    );
    return new Map();
  }
}
