export type { ApplyIfNewerOptions } from './applyIfNewer.js';
export { applyIfNewer } from './applyIfNewer.js';
export { classifyPostgresError, classifyStoreError } from './classifyError.js';
export { createStore } from './createStore.js';
export type { CallerTransaction } from './drivers/CallerTransactionDriver.js';
export type { PgPoolClientLike, PgPoolLike } from './drivers/PgDriver.js';
export type { PgliteLike, PgliteResultsLike, PgliteTransactionLike } from './drivers/PgliteDriver.js';
export {
  DriverNotInstalledError,
  isSchemaVersionError,
  SchemaVersionError,
  TransactionAbortedError,
  TransactionEndedError,
} from './errors.js';
export { quoteIdentifier } from './identifiers.js';
export { LATEST_VERSION } from './migrations/index.js';
export type {
  DiscardedOutboxRow,
  OutboxDeadLetter,
  OutboxDiscardReport,
  OutboxFailureGroup,
  OutboxRetryReport,
} from './outbox/outboxDeadLetters.js';
export type { OutboxStats, StuckOutboxRow } from './outbox/PostgresOutbox.js';
export { PostgresOutbox } from './outbox/PostgresOutbox.js';
export type { RelayEvent, RelayOptions, RelayRound } from './outbox/Relay.js';
export { createRelay, OUTBOX_CHANNEL, Relay } from './outbox/Relay.js';
export { PostgresStore } from './PostgresStore.js';
export type {
  EmbeddedStoreOptions,
  PostgresCallerTransactionOptions,
  PostgresConnectionStringOptions,
  PostgresEmbeddedOptions,
  PostgresPgliteOptions,
  PostgresPoolOptions,
  PostgresStoreCommonOptions,
  PostgresStoreOptions,
} from './store/options.js';
export type { PruneOptions } from './store/retention.js';
export type { MigrateResult } from './store/schema.js';
