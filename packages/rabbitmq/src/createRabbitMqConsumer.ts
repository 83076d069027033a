import {
  type AdapterOptions,
  type BrokerConfig,
  type Consumer,
  type ConsumerConfig,
  createConsumerWith,
  type SqlClient,
} from '@oncely/core';
import { parseBrokerOptions, type RabbitMqBrokerOptions } from './options.js';
import { RabbitMqAdapter } from './RabbitMqAdapter.js';

/** {@link createRabbitMqConsumer}'s options: a consumer config whose `broker` is RabbitMQ's. */
export interface RabbitMqConsumerOptions<TBody = unknown, Tx = SqlClient>
  extends Omit<ConsumerConfig<TBody, Tx>, 'broker'> {
  broker: RabbitMqBrokerOptions;
}

/**
 * The `createAdapter` every Oncely adapter package exports: `createConsumer` calls it for
 * `broker.type: 'rabbitmq'`. Throws a `ConfigError` naming the offending `broker.` field.
 *
 * @example
 * ```ts
 * const adapter = createAdapter({ type: 'rabbitmq', url: 'amqp://localhost', queue: 'payments' }, { consumerName: 'payments', log: console });
 * ```
 */
export function createAdapter(broker: BrokerConfig, options: AdapterOptions): RabbitMqAdapter {
  return new RabbitMqAdapter(parseBrokerOptions(broker), options);
}

/**
 * Creates a RabbitMQ consumer without going through `createConsumer`'s dynamic import,
 * with the broker options typed. Like `createConsumer`, it tells the adapter the handler
 * timeout, so a handler that can outlive the server's `consumer_timeout` is refused at
 * `start()`.
 *
 * @example
 * ```ts
 * const consumer = createRabbitMqConsumer({
 *   name: 'payments',
 *   broker: { url: process.env.RABBITMQ_URL!, queue: 'payments', queueType: 'quorum', consumerTimeoutMs: 1_800_000 },
 *   store: new PostgresStore({ connectionString: process.env.DATABASE_URL }),
 *   concurrency: 10,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [message.body.orderId]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export function createRabbitMqConsumer<TBody = unknown, Tx = SqlClient>(
  options: RabbitMqConsumerOptions<TBody, Tx>,
): Consumer<TBody, Tx> {
  return createConsumerWith({ ...options, broker: { ...options.broker, type: 'rabbitmq' } }, createAdapter);
}
