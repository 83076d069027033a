// Explicit named exports only (no `export *`).
export { ConfirmedPublisher } from './ConfirmedPublisher.js';
export type { ConsumerTimeoutInput } from './consumerTimeout.js';
export { consumerTimeoutFindings, DEFAULT_CONSUMER_TIMEOUT_MS } from './consumerTimeout.js';
export type { RabbitMqConsumerOptions } from './createRabbitMqConsumer.js';
export { createAdapter, createRabbitMqConsumer } from './createRabbitMqConsumer.js';
export { DeliveryChannel } from './DeliveryChannel.js';
export { openDeadLetters } from './deadLetters.js';
export { diagnose } from './diagnose.js';
export type { CountingRules } from './envelope.js';
export {
  ATTEMPTS_HEADER,
  CONSUMER_HEADER,
  DEAD_LETTERED_AT_HEADER,
  DETAIL_HEADER,
  deliveryCount,
  PUBLISH_ID_HEADER,
  REASON_HEADER,
  SOURCE_QUEUE_HEADER,
  stringifyHeaders,
  toEnvelope,
} from './envelope.js';
export {
  AMQP_ACCESS_REFUSED,
  AMQP_NO_ROUTE,
  AMQP_NOT_FOUND,
  AMQP_PRECONDITION_FAILED,
  amqpReplyCode,
  ChannelClosedError,
  RABBITMQ_OPERATION_FAILED,
  RabbitMqOperationError,
} from './errors.js';
export type {
  RabbitMqBinding,
  RabbitMqBrokerOptions,
  RabbitMqQueueType,
  RabbitMqRetryMode,
  RabbitMqTopologyOptions,
  ResolvedOptions,
  ResolvedTopology,
} from './options.js';
export { parseBrokerOptions, parseTopology } from './options.js';
export type { PublishOptions, PublishTarget } from './publish.js';
export { publish } from './publish.js';
export type { RabbitMqAdapterOptions } from './RabbitMqAdapter.js';
export { RabbitMqAdapter } from './RabbitMqAdapter.js';
export type { CopyPublisher } from './RabbitMqDelivery.js';
export { RabbitMqDelivery } from './RabbitMqDelivery.js';
export type { RabbitMqProducerOptions } from './RabbitMqProducer.js';
export { createRabbitMqProducer } from './RabbitMqProducer.js';
export type { RabbitMqTopology } from './topology.js';
export {
  assertTopology,
  DELAY_QUEUE_IDLE_EXPIRY_MS,
  delayQueueName,
  delayQueueOptions,
  retryDelayBucket,
  workQueueOptions,
} from './topology.js';
