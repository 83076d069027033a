import { type Consumer, type ConsumerConfig, createConsumerWith, type SqlClient } from '@oncely/core';
import { createAdapter } from './createAdapter.js';
import type { SqsBrokerConfig } from './sqsConfig.js';

/**
 * Options of {@link createSqsConsumer}: a consumer config whose `broker` is typed for SQS
 * (`type` may be left out).
 *
 * @example
 * ```ts
 * const options: SqsConsumerOptions<{ orderId: string }> = { name: 'payments', broker: { queueUrl }, store, handler };
 * ```
 */
export type SqsConsumerOptions<TBody = unknown, Tx = SqlClient> = Omit<
  ConsumerConfig<TBody, Tx>,
  'broker'
> & {
  broker: Omit<SqsBrokerConfig, 'type'> & { type?: 'sqs' };
};

/**
 * Creates a consumer on an SQS queue without loading the adapter by name, with the
 * broker options typed. It also hands the adapter the consumer's `idStrategy` and
 * `maxAttempts`, so `start()` refuses `'deduplication-id'` on a queue with content-based
 * deduplication and warns when the queue's redrive would fire before `maxAttempts`.
 *
 * @example
 * ```ts
 * const consumer = createSqsConsumer({
 *   name: 'payments',
 *   broker: { queueUrl: process.env.QUEUE_URL!, deadLetterQueueUrl: process.env.DLQ_URL },
 *   store: new PostgresStore({ connectionString: process.env.DATABASE_URL }),
 *   concurrency: 10,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [(message.body as any).orderId]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export function createSqsConsumer<TBody = unknown, Tx = SqlClient>(
  options: SqsConsumerOptions<TBody, Tx>,
): Consumer<TBody, Tx> {
  return createConsumerWith({ ...options, broker: { ...options.broker, type: 'sqs' } }, createAdapter);
}
