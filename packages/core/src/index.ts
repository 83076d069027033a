export { DEFAULT_BACKOFF, retryDelayMs } from './backoff.js';
export { decodeBody } from './body.js';
export { Consumer } from './Consumer.js';
export type { LoadConfigOptions, LoadedConfig } from './config.js';
export { ADAPTER_PACKAGES, CONSUMER_DEFAULTS, loadConfig, validateConsumerConfig } from './config.js';
export { createConsumer, createConsumerWith, loadAdapterModule } from './createConsumer.js';
export type { OncelyErrorCode } from './errors.js';
export {
  AdapterNotInstalledError,
  BrokerMisconfiguredError,
  ConfigError,
  ConsumerStateError,
  HandlerTimeoutError,
  isOncelyError,
  LeaseLostError,
  OncelyError,
  StoreReentrancyError,
  StoreUnavailableError,
} from './errors.js';
export { describeIdStrategy, resolveMessageId } from './idStrategy.js';
export type { LeaseKeeperOptions } from './LeaseKeeper.js';
export { LeaseKeeper } from './LeaseKeeper.js';
export { silentLogger, stderrLogger } from './logger.js';
export type {
  OutboxMessage,
  OutboxProducer,
  OutboxSendResult,
  OutboxStore,
  OutboxWrite,
  PublishOptions,
} from './outbox.js';
export {
  encodeOutboxBody,
  OutboxUnsupportedError,
  outboxOf,
  publishInTransaction,
  toOutboxWrite,
} from './outbox.js';
export type { BatchItem, BatchItemResult, ProcessOnceResult } from './processOnce.js';
export { MAX_TRANSIENT_RETRIES, processBatchOnce, processOnce, retryTransient } from './processOnce.js';
export type {
  AdapterLease,
  AdapterModule,
  AdapterOptions,
  AdapterRuntime,
  BackoffConfig,
  BodyFormat,
  BrokerAdapter,
  BrokerConfig,
  BrokerType,
  ConsumerConfig,
  ConsumerEvent,
  ConsumerEventName,
  DeadLetterReason,
  Delivery,
  DiagnoseFinding,
  DiagnoseReport,
  Envelope,
  Handler,
  HandlerContext,
  IdempotencyStore,
  IdStrategy,
  LeaseClaim,
  Logger,
  Message,
  MessageKey,
  OffsetStore,
  ProcessingMode,
  SettlementInfo,
  SqlClient,
  SqlResult,
  StoreErrorKind,
} from './types.js';
