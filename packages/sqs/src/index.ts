// Explicit exports only: this list is the package's public surface.
export { createAdapter } from './createAdapter.js';
export type { SqsConsumerOptions } from './createSqsConsumer.js';
export { createSqsConsumer } from './createSqsConsumer.js';
export { DEAD_LETTER_ATTRIBUTES } from './deadLetterAttributes.js';
export {
  DEAD_LETTER_CLOSE_TIMEOUT_MS,
  DEAD_LETTER_SESSION_VISIBILITY_SECONDS,
  openDeadLetters,
} from './deadLetters.js';
export { diagnose } from './diagnose.js';
export {
  isCredentialError,
  isQueueMissingError,
  isStaleReceiptError,
  SQS_OPERATION_FAILED,
  SqsOperationError,
  sqsErrorCode,
} from './errors.js';
export type { DeadLetterRoute, SqsAdapterOptions, SqsAdapterStats } from './SqsAdapter.js';
export { SqsAdapter } from './SqsAdapter.js';
export { MAX_TOTAL_VISIBILITY_MS } from './SqsDelivery.js';
export type { SqsProducerOptions } from './SqsProducer.js';
export { createSqsProducer } from './SqsProducer.js';
export type { QueueFacts } from './SqsQueueClient.js';
export type { OutgoingSqsMessage, SendRetryOptions, SentSqsMessage } from './sendMessage.js';
export { MESSAGE_ID_ATTRIBUTE, sendMessage } from './sendMessage.js';
export type { SqsBrokerConfig } from './sqsConfig.js';
