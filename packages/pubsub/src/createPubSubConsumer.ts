import { type Consumer, type ConsumerConfig, createConsumerWith, type SqlClient } from '@oncely/core';
import { createAdapter } from './createAdapter.js';
import type { PubSubBrokerConfig } from './pubsubConfig.js';

/**
 * Options of {@link createPubSubConsumer}: a consumer config whose `broker` is typed for
 * Pub/Sub (`type` may be left out).
 *
 * @example
 * ```ts
 * const options: PubSubConsumerOptions<{ orderId: string }> = { name: 'payments', broker: { subscription: 'payments' }, store, handler };
 * ```
 */
export type PubSubConsumerOptions<TBody = unknown, Tx = SqlClient> = Omit<
  ConsumerConfig<TBody, Tx>,
  'broker'
> & {
  broker: Omit<PubSubBrokerConfig, 'type'> & { type?: 'pubsub' };
};

/**
 * Creates a consumer on a Pub/Sub subscription without loading the adapter by name,
 * with the broker options typed.
 *
 * @example
 * ```ts
 * const consumer = createPubSubConsumer({
 *   name: 'payments',
 *   broker: { projectId: 'shop-prod', subscription: 'payments', deadLetterTopic: 'payments-dead-letters' },
 *   store: new PostgresStore({ connectionString: process.env.DATABASE_URL }),
 *   concurrency: 10,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [(message.body as any).orderId]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export function createPubSubConsumer<TBody = unknown, Tx = SqlClient>(
  options: PubSubConsumerOptions<TBody, Tx>,
): Consumer<TBody, Tx> {
  return createConsumerWith({ ...options, broker: { ...options.broker, type: 'pubsub' } }, createAdapter);
}
