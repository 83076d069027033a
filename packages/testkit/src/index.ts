// Explicit exports only (no `export *`). Each file's owner adds its own lines.

export type { AdapterConformanceOptions, MustFailOutcome, Symptom } from './adapterConformance.js';
export { runAdapterConformance } from './adapterConformance.js';
export type { ChildPlan, ChildReport, CrashPoint } from './childProtocol.js';
export { heldProxy, holdOn } from './connectHold.js';
export type { CrashingChild } from './crashingChild.js';
export { startCrashingChild } from './crashingChild.js';
export type { DialectStoresOptions } from './dialectStores.js';
export { dialectStores } from './dialectStores.js';
export type { TestkitErrorCode } from './errors.js';
export {
  ChildProcessError,
  HarnessIncompleteError,
  ServiceMissingError,
  TestkitError,
  WaitTimeoutError,
} from './errors.js';
export type {
  DispatchRecord,
  HeldSettlement,
  SettlementKind,
  SettlementRecord,
} from './FaultInjector.js';
export { FaultInjector } from './FaultInjector.js';
export type {
  AdapterFeatures,
  AdapterHarness,
  ChildModuleFactory,
  ChildModuleInput,
  ChildModuleResources,
  ConnectHold,
  HarnessSetup,
  PublishedMessage,
  SetupOptions,
  StoreHandle,
} from './harness.js';
export { Latch } from './Latch.js';
export { closedPort } from './ports.js';
export type { MigratableStore, PostgresStoresOptions } from './postgresStores.js';
export { postgresStores } from './postgresStores.js';
export { requireService } from './services.js';
export type { EventSource, RecordedEvent, WaitForOptions } from './spies.js';
export { ConsumerSpy, waitFor } from './spies.js';
export type { SqlDialect } from './sqlDialect.js';
export { mysqlDialect, POSTGRES_DIALECT } from './sqlDialect.js';
export type {
  StoreConformanceOptions,
  StoreFactory,
  StoreFactoryOptions,
  StoreUnderTest,
} from './storeConformance.js';
export { runStoreConformance } from './storeConformance.js';
export type { TcpProxyTarget } from './TcpProxy.js';
export { TcpProxy } from './TcpProxy.js';
export type { SettlementOverrides } from './withSettlements.js';
export { withSettlements } from './withSettlements.js';
