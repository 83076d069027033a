export type { MySqlApplyIfNewerOptions } from './applyIfNewer.js';
export { applyIfNewer } from './applyIfNewer.js';
export { classifyMySqlError, classifyMySqlStoreError } from './classifyError.js';
export { createStore } from './createStore.js';
export type { MySqlCallerTransaction } from './drivers/CallerTransactionDriver.js';
export type { MySqlPoolConnectionLike, MySqlPoolLike } from './drivers/PoolDriver.js';
export {
  isMySqlSchemaVersionError,
  KeyTooLongError,
  MySqlSchemaVersionError,
  MySqlTransactionAbortedError,
  MySqlTransactionEndedError,
} from './errors.js';
export { quoteMySqlIdentifier } from './identifiers.js';
export { MySqlStore } from './MySqlStore.js';
export { MYSQL_LATEST_VERSION } from './migrations/index.js';
export type {
  MySqlCallerTransactionOptions,
  MySqlMigrateResult,
  MySqlPoolOptions,
  MySqlPruneOptions,
  MySqlStoreCommonOptions,
  MySqlStoreOptions,
  MySqlUrlOptions,
} from './options.js';
