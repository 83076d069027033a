// Each helper file owns its own exports; keep this list explicit (no `export *`).
export type { AdapterConformanceOptions, AdapterFeatures, AdapterHarness, HarnessSetup, PublishedMessage } from './adapterConformance.js';
export { runAdapterConformance } from './adapterConformance.js';
export type { StoreFactory } from './storeConformance.js';
export { runStoreConformance } from './storeConformance.js';
export { TcpProxy } from './TcpProxy.js';
export { ConsumerSpy, waitFor } from './spies.js';
export { requireService } from './services.js';
