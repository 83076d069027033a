// Explicit exports only (no `export *`). Each file's owner adds its own lines.
export type { AdapterFeatures, AdapterHarness, HarnessSetup, PublishedMessage, SetupOptions } from './harness.js';
export { runAdapterConformance } from './adapterConformance.js';
export { runStoreConformance } from './storeConformance.js';
export { TcpProxy } from './TcpProxy.js';
export { ConsumerSpy, waitFor } from './spies.js';
export { requireService } from './services.js';
