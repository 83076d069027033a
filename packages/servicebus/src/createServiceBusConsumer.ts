import { type Consumer, type ConsumerConfig, createConsumerWith, type SqlClient } from '@oncely/core';
import { createAdapter } from './createAdapter.js';
import type { ServiceBusBrokerConfig } from './serviceBusConfig.js';

/**
 * Options of {@link createServiceBusConsumer}: a consumer config whose `broker` is typed
 * for Service Bus (`type` may be left out).
 *
 * @example
 * ```ts
 * const options: ServiceBusConsumerOptions = { name: 'payments', broker: { connectionString, queueName: 'payments' }, store, handler };
 * ```
 */
export type ServiceBusConsumerOptions<TBody = unknown, Tx = SqlClient> = Omit<
  ConsumerConfig<TBody, Tx>,
  'broker'
> & {
  broker: Omit<ServiceBusBrokerConfig, 'type'> & { type?: 'servicebus' };
};

/**
 * Creates a consumer on a Service Bus queue or subscription without loading the adapter
 * by name, with the broker options typed.
 *
 * @example
 * ```ts
 * const consumer = createServiceBusConsumer({
 *   name: 'payments',
 *   broker: { connectionString: process.env.SERVICEBUS_CONNECTION_STRING!, queueName: 'payments', maxDeliveryCount: 10 },
 *   store: new PostgresStore({ connectionString: process.env.DATABASE_URL }),
 *   concurrency: 10,
 *   maxAttempts: 5,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [(message.body as any).orderId]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export function createServiceBusConsumer<TBody = unknown, Tx = SqlClient>(
  options: ServiceBusConsumerOptions<TBody, Tx>,
): Consumer<TBody, Tx> {
  return createConsumerWith({ ...options, broker: { ...options.broker, type: 'servicebus' } }, createAdapter);
}
