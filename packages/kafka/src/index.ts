export type {
  KafkaBrokerConfig,
  KafkaBrokerOptions,
  KafkaClientLike,
  KafkaClientName,
  KafkaRetryOptions,
  PlatformaticClientFactories,
  PlatformaticClientOptions,
  PlatformaticConsumerOptions,
  ResolvedKafkaConfig,
} from './config.js';
export { resolveKafkaConfig } from './config.js';
export { createAdapter } from './createAdapter.js';
export type { KafkaConsumerOptions } from './createKafkaConsumer.js';
export { createKafkaConsumer } from './createKafkaConsumer.js';
export { DEAD_LETTER_HEADERS, deadLetterRecord } from './deadLetter.js';
export { openDeadLetters } from './deadLetters.js';
export { diagnose } from './diagnose.js';
export type { KafkaRawRecord } from './envelope.js';
export { headersToAttributes, toEnvelope } from './envelope.js';
export { KafkaDeadLetterError, KafkaSendError, KafkaTopicMissingError } from './errors.js';
export { findDeadLetters } from './findDeadLetters.js';
export { KafkaAdapter } from './KafkaAdapter.js';
export type { KafkaProducerBrokerOptions, KafkaProducerOptions } from './KafkaProducer.js';
export { createKafkaProducer } from './KafkaProducer.js';
export { kafkaLogCreator } from './kafkaLogger.js';
export type {
  KafkaProducerLike,
  KafkaSendMessage,
  KafkaSendOptions,
  PlatformaticProducerLike,
} from './send.js';
export { MESSAGE_ID_HEADER, send } from './send.js';
export type { CreateTopicsOptions, PlatformaticAdminLike } from './topics.js';
export { createTopics } from './topics.js';
