import type { BrokerConfig } from '@oncely/core';
import { PubSubAdapter, type PubSubAdapterOptions } from './PubSubAdapter.js';

/**
 * Builds the Pub/Sub adapter for a `broker` section; `createConsumer` calls it when
 * `broker.type` is `'pubsub'`. Throws a `ConfigError` naming the field for a bad option.
 *
 * @example
 * ```ts
 * const adapter = createAdapter({ type: 'pubsub', subscription: 'payments' }, { consumerName: 'payments', log: console });
 * ```
 */
export function createAdapter(broker: BrokerConfig, options: PubSubAdapterOptions): PubSubAdapter {
  return new PubSubAdapter(broker, options);
}
