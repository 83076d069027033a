// Explicit exports only: this list is the subpath's public surface.
export type {
  CorrelationFilter,
  EmulatorConfig,
  EntitySettings,
  NamespaceConfig,
  QueueConfig,
  QueueProperties,
  RuleConfig,
  SubscriptionConfig,
  TopicConfig,
  TopicProperties,
  UserConfig,
} from './config.js';
export { MAX_LOCK_DURATION_MS, parseDuration, queueSettings } from './config.js';
export type { AmqpMessage } from './MessageEntity.js';
export { MAX_DELIVERY_COUNT_EXCEEDED, TTL_EXPIRED } from './MessageEntity.js';
export { BATCH_MESSAGE_FORMAT, CONDITIONS } from './model.js';
export type { EntitySnapshot, ServiceBusEmulatorOptions } from './ServiceBusEmulator.js';
export { ServiceBusEmulator, startServiceBusEmulator } from './ServiceBusEmulator.js';
