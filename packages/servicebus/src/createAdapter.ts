import type { BrokerConfig } from '@oncely/core';
import { ServiceBusAdapter, type ServiceBusAdapterOptions } from './ServiceBusAdapter.js';

/**
 * Builds the Service Bus adapter for a `broker` section; `createConsumer` calls it when
 * `broker.type` is `'servicebus'`. Throws a `ConfigError` naming the field for a bad option.
 *
 * @example
 * ```ts
 * const adapter = createAdapter({ type: 'servicebus', connectionString, queueName: 'payments' }, { consumerName: 'payments', log: console });
 * ```
 */
export function createAdapter(broker: BrokerConfig, options: ServiceBusAdapterOptions): ServiceBusAdapter {
  return new ServiceBusAdapter(broker, options);
}
