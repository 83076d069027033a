import { type Consumer, type ConsumerConfig, createConsumerWith, type SqlClient } from '@oncely/core';
import type { KafkaBrokerConfig, KafkaBrokerOptions } from './config.js';
import { createAdapter } from './createAdapter.js';

/**
 * `createKafkaConsumer` options: a consumer config whose `broker` is the Kafka section
 * (`type` may be left out).
 *
 * @example
 * ```ts
 * const options: KafkaConsumerOptions<{ orderId: string }> = {
 *   name: 'payments',
 *   broker: { brokers: ['localhost:9092'], topic: 'payments' },
 *   store,
 *   handler: async (message, ctx) => { await ctx.tx.query('SELECT 1'); },
 * };
 * ```
 */
export type KafkaConsumerOptions<TBody = unknown, Tx = SqlClient> = Omit<
  ConsumerConfig<TBody, Tx>,
  'broker'
> & {
  broker: KafkaBrokerOptions & { type?: 'kafka' };
};

/**
 * Typed factory: a consumer on a Kafka topic without the dynamic adapter lookup of
 * `createConsumer`. Returns the consumer unstarted.
 *
 * @example
 * ```ts
 * const consumer = createKafkaConsumer({
 *   name: 'payments',
 *   broker: { brokers: ['localhost:9092'], topic: 'payments', partitionsConsumedConcurrently: 4 },
 *   store: new PostgresStore({ connectionString: process.env.DATABASE_URL }),
 *   concurrency: 4,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [message.body.orderId]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export function createKafkaConsumer<TBody = unknown, Tx = SqlClient>(
  options: KafkaConsumerOptions<TBody, Tx>,
): Consumer<TBody, Tx> {
  const broker: KafkaBrokerConfig = { ...options.broker, type: 'kafka' };
  return createConsumerWith({ ...options, broker }, createAdapter);
}
