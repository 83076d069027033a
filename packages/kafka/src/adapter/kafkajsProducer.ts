import type { Producer } from 'kafkajs';
import { missingPartitionError, type RecordProducer } from './clientApi.js';

/**
 * A kafkajs producer (the adapter's own or yours) behind the interface. kafkajs' default
 * partitioner is already Java's murmur2 (and spreads keyless records), and its errors carry
 * `type` and `retriable`.
 */
export function kafkajsRecordProducer(producer: Producer): RecordProducer {
  return {
    connect: () => producer.connect(),
    async send(topic, messages, options = {}) {
      const written = await producer.send({
        topic,
        acks: -1,
        ...(options.timeoutMs !== undefined ? { timeout: options.timeoutMs } : {}),
        messages,
      });
      // kafkajs leaves a record of a partition the topic lacks out of every request and
      // resolves: a partition named but not in the answer was not written.
      for (const { partition } of messages) {
        if (partition !== undefined && !written.some((entry) => entry.partition === partition)) {
          throw missingPartitionError(topic, partition);
        }
      }
      return written;
    },
    disconnect: () => producer.disconnect(),
  };
}
