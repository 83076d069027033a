import type { AdapterOptions, BrokerAdapter, BrokerConfig } from '@oncely/core';
import { KafkaAdapter } from './KafkaAdapter.js';

/**
 * The adapter factory `createConsumer` calls for `broker.type: 'kafka'`. Checks the
 * `broker` section at once (a `ConfigError` names the field); connects on `start()`.
 *
 * @example
 * ```ts
 * const adapter = createAdapter({ type: 'kafka', brokers: ['localhost:9092'], topic: 'orders' }, { consumerName: 'orders', log: stderrLogger });
 * ```
 */
export function createAdapter(broker: BrokerConfig, options: AdapterOptions): BrokerAdapter {
  return new KafkaAdapter(broker, options);
}
