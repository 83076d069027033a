import type { Producer } from 'kafkajs';
import type { RecordProducer } from './clientApi.js';

/**
 * A kafkajs producer (the adapter's own or yours) behind the interface. kafkajs' default
 * partitioner is already Java's murmur2, and its errors carry `type` and `retriable`.
 */
export function kafkajsRecordProducer(producer: Producer): RecordProducer {
  return {
    connect: () => producer.connect(),
    send: (topic, messages, options = {}) =>
      producer.send({
        topic,
        acks: -1,
        ...(options.timeoutMs !== undefined ? { timeout: options.timeoutMs } : {}),
        messages,
      }),
    disconnect: () => producer.disconnect(),
  };
}
