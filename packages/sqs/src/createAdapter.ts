import type { BrokerConfig } from '@oncely/core';
import { SqsAdapter, type SqsAdapterOptions } from './SqsAdapter.js';

/**
 * Builds the SQS adapter for a `broker` section; `createConsumer` calls it when
 * `broker.type` is `'sqs'`. Throws a `ConfigError` naming the field for a bad option.
 *
 * @example
 * ```ts
 * const adapter = createAdapter({ type: 'sqs', queueUrl }, { consumerName: 'payments', log: console });
 * ```
 */
export function createAdapter(broker: BrokerConfig, options: SqsAdapterOptions): SqsAdapter {
  return new SqsAdapter(broker, options);
}
