import type { BrokerConfig, IdempotencyStore, SqlClient } from '@oncely/core';

/**
 * What a broker can do; a conformance scenario whose feature is absent is skipped with
 * the feature's name in its title. See shared/CONFORMANCE.md.
 */
export interface AdapterFeatures {
  /** A failed message comes back (retryLater works). */
  redeliveryOnRetry: boolean;
  /** The broker can delay a retry (SQS visibility, memory, RabbitMQ retry topology). */
  delayedRetry: boolean;
  /** Leases can be renewed (extendLease). */
  leaseExtension: boolean;
  /** A broker-native dead-letter destination exists. */
  nativeDeadLetter: boolean;
  /** The broker counts deliveries itself. */
  deliveryCount: boolean;
  ordering: 'none' | 'key' | 'partition';
  competingConsumers: boolean;
  /** `harness.disconnect()` can cut the client's connections from the server side. */
  serverSideDisconnect: boolean;
  /** `harness.restart()` restarts the broker. */
  brokerRestart: boolean;
  /** The broker itself drops producer duplicates (SQS FIFO, Service Bus duplicate detection). */
  brokerDedup: boolean;
  /** A settle with an expired lease reports an error (not SQS). */
  staleAckDetectable: boolean;
  /** The broker outlives a killed consumer process (not the in-process memory broker). */
  crossProcess: boolean;
}

/** A message a scenario publishes. */
export interface PublishedMessage {
  /** The stable ID; omitted to publish a message without one (poison). */
  id?: string;
  body: unknown;
  /** Sent as-is instead of JSON-encoding `body` (an unparseable body). */
  rawBody?: string;
  orderingKey?: string;
  attributes?: Record<string, string>;
}

/** What a scenario asks of the queue/topic it gets. */
export interface SetupOptions {
  /** Broker lease length (visibility timeout, lock duration, ack deadline). @default adapter's test default */
  leaseMs?: number;
  /** Broker-side max deliveries before its own dead-lettering, where configurable. */
  maxDeliveries?: number;
  /** Ordered queue / keyed ordering wanted. */
  ordered?: boolean;
  /** Partitions (Kafka). */
  partitions?: number;
}

/** One provisioned, isolated destination for one test. */
export interface HarnessSetup {
  publish(messages: readonly PublishedMessage[]): Promise<void>;
  /** The `broker` section for createConsumer; `overrides` are merged in. */
  brokerConfig(overrides?: Record<string, unknown>): BrokerConfig;
  /** What reached the dead-letter destination, with reasons. */
  deadLetters(): Promise<Array<{ id?: string; reason: string }>>;
  /** Messages not yet settled, where the broker can tell (else undefined). */
  backlog(): Promise<number | undefined>;
  /** Make the broker hand out an unacked message again the way it would after a lost ack. */
  forceRedelivery?(id: string): Promise<void>;
  /** Server-side cut of the client's connections. */
  disconnect?(): Promise<void>;
  /** Restart the broker. */
  restart?(): Promise<void>;
  teardown(): Promise<void>;
}

/** What an adapter's test passes to runAdapterConformance. */
export interface AdapterHarness {
  /** Broker type for createConsumer (the adapter package is loaded by it). */
  brokerType: string;
  setup(test: { name: string } & SetupOptions): Promise<HarnessSetup>;
  /** The store under test: real PostgreSQL unless a scenario says otherwise. */
  createStore(): Promise<{ store: IdempotencyStore<SqlClient>; cleanup(): Promise<void> }>;
  /**
   * The same store reached through a TCP proxy (store-outage scenario): `port` is the
   * proxy's, so the harness builds a connection to 127.0.0.1:port.
   */
  createStoreVia?(port: number): Promise<{ store: IdempotencyStore<SqlClient>; cleanup(): Promise<void> }>;
  /** Where the real PostgreSQL listens, for the TCP proxy. */
  databaseAddress?: { host: string; port: number };
  /**
   * For crossProcess scenarios: a module a child process can import whose default export
   * builds `{ store, broker }` from JSON the parent passes (see childConsumer).
   */
  childModule?: string;
}
