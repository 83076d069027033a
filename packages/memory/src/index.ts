export type { MemoryBrokerConfig, ResolvedMemoryConfig } from './config.js';
export { resolveMemoryConfig } from './config.js';
export type { MemoryConsumerOptions } from './createMemoryConsumer.js';
export { createMemoryConsumer } from './createMemoryConsumer.js';
export { openDeadLetters } from './deadLetters.js';
export { diagnose } from './diagnose.js';
export { BrokerClosedError, InjectedFaultError, StaleReceiptError } from './errors.js';
export type { RandomFaultsOptions } from './faults.js';
export { randomFaults, seededRandom } from './faults.js';
export { createAdapter, MemoryAdapter } from './MemoryAdapter.js';
export { MESSAGE_ID_ATTRIBUTE, MemoryBroker } from './MemoryBroker.js';
export type {
  BrokerFaults,
  DeadLetter,
  FaultTarget,
  MemoryDelivery,
  NackOptions,
  QueueOptions,
  QueueStats,
  ReceiveOptions,
  SendInput,
  SendResult,
} from './types.js';
