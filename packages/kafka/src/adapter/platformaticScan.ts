import type { ResolvedKafkaConfig } from '../config.js';
import { scanTimeout, type TopicScan } from './clientApi.js';
import { newConsumer } from './platformaticFactories.js';
import { baseOptions, toKafkaRecord, typed } from './platformaticOptions.js';

/**
 * A topic scan on @platformatic/kafka: a consumer of a throwaway group whose stream starts
 * at the first offset and commits nothing, closed at the end.
 */
export async function platformaticScanTopic(config: ResolvedKafkaConfig, scan: TopicScan): Promise<void> {
  const ends = new Map(scan.ends);
  if (ends.size === 0) return;
  const consumer = newConsumer(config, {
    ...baseOptions(config, `${config.clientId}-scan`),
    groupId: scan.groupId,
    autocommit: false,
  });
  let timer: NodeJS.Timeout | undefined;
  try {
    const stream = await consumer.consume({
      topics: [scan.topic],
      mode: 'earliest',
      autocommit: false,
      maxWaitTime: 500,
    });
    try {
      await new Promise<void>((resolve, reject) => {
        timer = setTimeout(() => reject(scanTimeout(scan)), scan.timeoutMs);
        stream.on('error', (error) => reject(typed(error)));
        // The stream may hand a record over again (a fetch repeated across a rejoin): each
        // offset is visited once.
        const visited = new Set<string>();
        stream.on('data', (message) => {
          const end = ends.get(message.partition);
          if (end === undefined || message.offset >= end) return;
          if (message.offset < (scan.starts?.get(message.partition) ?? -1n)) return;
          const at = `${message.partition}:${message.offset}`;
          if (visited.has(at)) return;
          visited.add(at);
          if (scan.visit(toKafkaRecord(message), message.partition)) return resolve();
          if (message.offset + 1n >= end) ends.delete(message.partition);
          if (ends.size === 0) resolve();
        });
      });
    } finally {
      await stream.close().catch(() => {});
    }
  } finally {
    clearTimeout(timer);
    await consumer.close(true).catch(() => {});
  }
}
