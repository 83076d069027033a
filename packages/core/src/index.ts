export { DEFAULT_BACKOFF, pauseUnlessAborted, retryDelayMs } from './backoff.js';
export { decodeBody } from './body.js';
export { Consumer } from './Consumer.js';
export { ADAPTER_PACKAGES, CONSUMER_DEFAULTS, validateConsumerConfig } from './config.js';
export type { ConsumerOptions } from './createConsumer.js';
export { createConsumer, createConsumerWith, loadAdapterModule } from './createConsumer.js';
export type {
  DeadLetterInfo,
  DeadLetterListing,
  DeadLetterPassResult,
  DeadLetterSelection,
  DiscardReport,
  FailureGroup,
  PartialReplayReport,
  ReplayReport,
} from './deadLetters.js';
export {
  completedPassOf,
  DeadLetterCloseError,
  DeadLetters,
  failureGroupId,
  maskFailureError,
  replayReportOf,
} from './deadLetters.js';
export type { DiscardRow } from './discardRecord.js';
export { toDiscardRecord } from './discardRecord.js';
export type { OncelyErrorCode } from './errors.js';
export {
  AdapterNotInstalledError,
  BrokerConnectionError,
  BrokerMisconfiguredError,
  ConfigError,
  ConsumerStateError,
  HandlerTimeoutError,
  isOncelyError,
  LeaseLostError,
  OncelyError,
  redactSecrets,
  StoreReentrancyError,
  StoreUnavailableError,
} from './errors.js';
export type { FingerprintedPayload } from './fingerprint.js';
export { fingerprintDelivery, payloadFingerprint, validateFingerprintOptions } from './fingerprint.js';
export { describeIdStrategy, resolveMessageId } from './idStrategy.js';
export type { LeaseKeeperOptions } from './LeaseKeeper.js';
export { LeaseKeeper } from './LeaseKeeper.js';
export type { LoadConfigOptions, LoadedConfig } from './loadConfig.js';
export {
  brokerOptionSource,
  describeEnvironmentVariables,
  labelBrokerError,
  loadConfig,
} from './loadConfig.js';
export { silentLogger, stderrLogger, toLogger } from './logger.js';
export type {
  OutboxMessage,
  OutboxProducer,
  OutboxSendResult,
  OutboxStore,
  OutboxWrite,
  PublishOptions,
} from './outbox.js';
export {
  checkOutboxWrite,
  defaultPublishId,
  encodeOutboxBody,
  OutboxIdConflictError,
  OutboxUnsupportedError,
  outboxIdPart,
  outboxOf,
  publishInTransaction,
  toOutboxWrite,
} from './outbox.js';
export type {
  BatchItem,
  BatchItemResult,
  BatchMessage,
  BatchOptions,
  OrderedBatchItemResult,
  ProcessOnceOptions,
  ProcessOnceResult,
} from './processOnce.js';
export {
  MAX_TRANSIENT_RETRIES,
  processBatchOnce,
  processBatchTogether,
  processOnce,
  retryTransient,
} from './processOnce.js';
export type { StoreConfig, StoreModule } from './storeConfig.js';
export { isStoreConfig, openStore, STORE_PACKAGES, StoreNotInstalledError } from './storeConfig.js';
export type { TelemetryConfig } from './telemetry.js';
export {
  DEAD_LETTER_BACKLOG_TIMEOUT_MS,
  extractTraceContext,
  GAUGE_READ_WARN_INTERVAL_MS,
  GaugeReadLog,
  INSTRUMENTATION_SCOPE,
  traceHeaders,
} from './telemetry.js';
export type {
  AdapterLease,
  AdapterModule,
  AdapterOptions,
  AdapterRuntime,
  BackoffConfig,
  BatchEntry,
  BatchHandler,
  BodyFormat,
  BrokerAdapter,
  BrokerConfig,
  BrokerOptionsByType,
  BrokerType,
  ConsumerConfig,
  ConsumerEvent,
  ConsumerEventName,
  DeadLetterBacklog,
  DeadLetterCopy,
  DeadLetterLedger,
  DeadLetterLedgerEntry,
  DeadLetterLog,
  DeadLetterPassLock,
  DeadLetterReason,
  DeadLetterSession,
  Delivery,
  DiagnoseFinding,
  DiagnoseReport,
  DiscardRecord,
  Envelope,
  FingerprintStore,
  Handler,
  HandlerContext,
  HeldDeadLetter,
  HttpKeyRecord,
  HttpKeyResponse,
  HttpKeyStore,
  IdempotencyStore,
  IdStrategy,
  LeaseClaim,
  Logger,
  Message,
  MessageKey,
  OffsetStore,
  PayloadFingerprintOption,
  PayloadMismatch,
  ProcessingMode,
  SettlementInfo,
  SqlClient,
  SqlResult,
  StoreErrorKind,
  TypedBrokerConfig,
} from './types.js';
