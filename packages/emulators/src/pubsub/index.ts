// A Docker-free Google Cloud Pub/Sub emulator on @grpc/grpc-js, serving the protos of
// @google-cloud/pubsub. Behaviour and limits: docs/pubsub.md.

export type { SettlementFailure, SettlementFailureHandle, SettlementRpc } from './faults.js';
export type {
  EmulatedMessageView,
  PubSubEmulator,
  PubSubEmulatorOptions,
  SubscriptionView,
} from './PubSubEmulator.js';
export { startPubSubEmulator } from './PubSubEmulator.js';
