// Explicit exports only: this list is the package's public surface.
export { createAdapter } from './createAdapter.js';
export type { PubSubConsumerOptions } from './createPubSubConsumer.js';
export { createPubSubConsumer } from './createPubSubConsumer.js';
export type { DeadLetterInfo } from './deadLetterCopy.js';
export { cutUtf8, DEAD_LETTER_ATTRIBUTES, deadLetterAttributes, readDeadLetter } from './deadLetterCopy.js';
export { DEAD_LETTER_SESSION_LEASE_SECONDS, openDeadLetters } from './deadLetters.js';
export { diagnose } from './diagnose.js';
export {
  ackIdErrors,
  INVALID_ACK_ID,
  isInvalidAckId,
  PUBSUB_OPERATION_FAILED,
  PubSubMessageInvalidError,
  PubSubOperationError,
} from './errors.js';
export type { PubSubAdapterOptions } from './PubSubAdapter.js';
export { PubSubAdapter } from './PubSubAdapter.js';
export { PubSubDelivery } from './PubSubDelivery.js';
export type { PubSubProducerOptions } from './PubSubProducer.js';
export { createPubSubProducer } from './PubSubProducer.js';
export type { PubSubAdapterStats } from './PubSubSettler.js';
export type { IdentifiedMessage, PublishWithIdOptions } from './publishWithId.js';
export { publishWithId } from './publishWithId.js';
export type { PubSubBrokerConfig } from './pubsubConfig.js';
export { MAX_ACK_DEADLINE_SECONDS } from './pubsubConfig.js';
export type { PubSubAdapterHealth } from './SubscriberStream.js';
export type { SubscriptionFacts } from './subscriptionFacts.js';
