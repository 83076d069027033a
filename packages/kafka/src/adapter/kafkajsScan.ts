import type { Kafka as KafkaClient } from 'kafkajs';
import { scanTimeout, type TopicScan } from './clientApi.js';

/**
 * A topic scan on kafkajs: a consumer of a throwaway group that reads from the first
 * offset with `eachBatch` and commits nothing, disconnected at the end.
 */
export async function kafkajsScanTopic(kafka: KafkaClient, scan: TopicScan): Promise<void> {
  const ends = new Map(scan.ends);
  if (ends.size === 0) return;
  const consumer = kafka.consumer({ groupId: scan.groupId, allowAutoTopicCreation: false });
  let timer: NodeJS.Timeout | undefined;
  try {
    await consumer.connect();
    await consumer.subscribe({ topic: scan.topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      timer = setTimeout(() => reject(scanTimeout(scan)), scan.timeoutMs);
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const end = ends.get(batch.partition);
            if (end === undefined) return;
            const start = scan.starts?.get(batch.partition) ?? -1n;
            for (const message of batch.messages) {
              if (BigInt(message.offset) < start) continue;
              if (BigInt(message.offset) >= end) break;
              if (scan.visit(message, batch.partition)) return resolve();
            }
            if (BigInt(batch.lastOffset()) + 1n >= end) ends.delete(batch.partition);
            if (ends.size === 0) resolve();
          },
        })
        .catch(reject);
      // After run(), as kafkajs requires: the fetch begins there instead of the log start.
      for (const [partition, start] of scan.starts ?? []) {
        if (ends.has(partition)) consumer.seek({ topic: scan.topic, partition, offset: start.toString() });
      }
    });
  } finally {
    clearTimeout(timer);
    await consumer.disconnect().catch(() => {});
  }
}
