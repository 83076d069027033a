// Explicit exports only: this list is the package's public surface.
export { createAdapter } from './createAdapter.js';
export type { ServiceBusConsumerOptions } from './createServiceBusConsumer.js';
export { createServiceBusConsumer } from './createServiceBusConsumer.js';
export { DEAD_LETTER_CLOSE_TIMEOUT_MS, openDeadLetters } from './deadLetters.js';
export { diagnose } from './diagnose.js';
export {
  isLockLostError,
  SERVICEBUS_OPERATION_FAILED,
  ServiceBusOperationError,
  serviceBusErrorCode,
} from './errors.js';
export { findDeadLetters } from './findDeadLetters.js';
export { retryCopy } from './retryCopy.js';
export type { ServiceBusAdapterOptions, ServiceBusAdapterStats } from './ServiceBusAdapter.js';
export { ServiceBusAdapter } from './ServiceBusAdapter.js';
export { ServiceBusDelivery } from './ServiceBusDelivery.js';
export type { ServiceBusProducerOptions } from './ServiceBusProducer.js';
export { createServiceBusProducer } from './ServiceBusProducer.js';
export type { SendWithIdOptions } from './sendWithId.js';
export { sendWithId } from './sendWithId.js';
export type { ServiceBusBrokerConfig } from './serviceBusConfig.js';
export { MAX_LOCK_DURATION_MS } from './serviceBusConfig.js';
export { COPY_PROPERTIES, toEnvelope } from './toEnvelope.js';
