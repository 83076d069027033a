export type { LambdaErrorCode } from './errors.js';
export { BatchFailedError, InvalidEventError } from './errors.js';
export type {
  BatchResponse,
  KafkaBatchResponse,
  KafkaEventLike,
  KafkaItemIdentifier,
  KafkaRecordLike,
  SqsEventLike,
  SqsRecordLike,
} from './events.js';
export type { KafkaHandlerOptions } from './kafkaHandler.js';
export { kafkaHandler, prepareKafkaRecord } from './kafkaHandler.js';
export type {
  InvocationDeadline,
  LambdaContextLike,
  LambdaHandlerOptions,
  PreparedRecord,
} from './RecordRunner.js';
export type { SqsHandlerOptions } from './sqsHandler.js';
export { prepareSqsRecord, sqsHandler } from './sqsHandler.js';
