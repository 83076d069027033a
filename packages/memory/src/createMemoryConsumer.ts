import { type Consumer, type ConsumerConfig, createConsumerWith, type SqlClient } from '@oncely/core';
import type { MemoryBrokerConfig } from './config.js';
import { createAdapter } from './MemoryAdapter.js';

/** Options of {@link createMemoryConsumer}: a consumer config whose `broker` section is typed for the memory broker. */
export interface MemoryConsumerOptions<TBody = unknown, Tx = SqlClient>
  extends Omit<ConsumerConfig<TBody, Tx>, 'broker'> {
  /** The memory broker section; `type` may be left out. */
  broker: Omit<MemoryBrokerConfig, 'type'> & { type?: 'memory' };
}

/**
 * Typed factory for a consumer on the in-process {@link MemoryBroker}, without the
 * dynamic adapter loading of `createConsumer`.
 *
 * @example
 * ```ts
 * const broker = new MemoryBroker();
 * const store = PostgresStore.embedded();
 * await store.migrate();
 * const consumer = createMemoryConsumer({
 *   name: 'payments',
 *   broker: { broker, queue: 'payments' },
 *   store,
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [message.id]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export function createMemoryConsumer<TBody = unknown, Tx = SqlClient>(
  options: MemoryConsumerOptions<TBody, Tx>,
): Consumer<TBody, Tx> {
  return createConsumerWith({ ...options, broker: { ...options.broker, type: 'memory' } }, createAdapter);
}
