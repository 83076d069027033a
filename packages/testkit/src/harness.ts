import type { AdapterModule, BrokerConfig, IdempotencyStore, IdStrategy, SqlClient } from '@oncely/core';
import type { SqlDialect } from './sqlDialect.js';

/**
 * What a broker can do; a conformance scenario whose feature is absent is skipped with
 * the feature's name in its title. See shared/CONFORMANCE.md.
 *
 * @example
 * ```ts
 * const features: AdapterFeatures = {
 *   redeliveryOnRetry: true, delayedRetry: true, leaseExtension: false, nativeDeadLetter: true,
 *   deliveryCount: false, ordering: 'none', competingConsumers: true, serverSideDisconnect: true,
 *   brokerRestart: false, brokerDedup: false, staleAckDetectable: true, crossProcess: true,
 * };
 * ```
 */
export interface AdapterFeatures {
  /** A failed message comes back (retryLater works). */
  redeliveryOnRetry: boolean;
  /** The broker can delay a retry (SQS visibility, memory, RabbitMQ retry topology). */
  delayedRetry: boolean;
  /**
   * Deliveries carry a broker lease that lapses when not renewed, and `extendLease` renews
   * it. False for brokers without leases (RabbitMQ): lease scenarios then trigger the
   * redelivery with `forceRedelivery` instead of waiting for a lapse.
   */
  leaseExtension: boolean;
  /** A broker-native dead-letter destination exists. */
  nativeDeadLetter: boolean;
  /** The broker counts deliveries itself. */
  deliveryCount: boolean;
  ordering: 'none' | 'key' | 'partition';
  competingConsumers: boolean;
  /** `setup.disconnect()` can cut the client's connections from the server side. */
  serverSideDisconnect: boolean;
  /** `setup.restart()` restarts the broker. */
  brokerRestart: boolean;
  /** The broker itself drops producer duplicates (SQS FIFO, Service Bus duplicate detection). */
  brokerDedup: boolean;
  /** A settle with an expired lease reports an error (not SQS). */
  staleAckDetectable: boolean;
  /** The broker outlives a killed consumer process (not the in-process memory broker). */
  crossProcess: boolean;
  /**
   * `setup.holdConnections()` can hold a consumer's connections at connect (a TCP proxy
   * on its way to the broker), so scenario 20 can stop it while its adapter is starting.
   * Not the in-process memory broker, which has no connection. @default false
   */
  connectHold?: boolean;
}

/**
 * Connections held at connect on their way to the broker (feature `connectHold`): a
 * consumer built with `brokerOverrides` reaches the broker through a TCP proxy that
 * accepts its connections but forwards nothing until `release()`.
 *
 * @example
 * ```ts
 * const hold = await setup.holdConnections!();
 * const consumer = run.buildConsumer({ label: 'boot', handler, brokerOverrides: hold.brokerOverrides });
 * void consumer.start();
 * await waitFor(() => hold.connections > 0);
 * hold.release();
 * await hold.close();
 * ```
 */
export interface ConnectHold {
  /** Merged into `setup.brokerConfig()`: the broker's address through the proxy. */
  brokerOverrides: Record<string, unknown>;
  /** Connections through the proxy open now, held or forwarded. */
  readonly connections: number;
  /** Forwards the held connections (and every later one) from now on. */
  release(): void;
  /** Releases, and closes the proxy unless the harness keeps it for other scenarios. */
  close(): Promise<void>;
  /**
   * Why the client keeps a connection open after the adapter closed even when the
   * consumer was started and stopped the ordinary way (a leak of its own, not of a stop
   * during start). Only then does scenario 20 skip its count of open connections, saying
   * so in the log; every other check still runs. @default undefined (they are counted)
   */
  connectionsOutliveClose?: string;
}

/**
 * A message a scenario publishes.
 *
 * @example
 * ```ts
 * const messages: PublishedMessage[] = [{ id: 'm-1', body: { n: 1 } }, { body: {} }, { id: 'bad', body: null, rawBody: '{oops' }];
 * ```
 */
export interface PublishedMessage {
  /**
   * The stable ID, published so that the adapter's default ID strategy (or
   * {@link AdapterHarness.idStrategy}) finds it. Omitted to publish a message without
   * one (poison).
   */
  id?: string;
  /** JSON-encoded by the harness unless `rawBody` is set. */
  body: unknown;
  /** Sent as-is instead of JSON-encoding `body` (an unparseable body). */
  rawBody?: string;
  /** Ordering key / message group / partition key; only sent when the scenario asks for ordering. */
  orderingKey?: string;
  attributes?: Record<string, string>;
}

/**
 * What a scenario asks of the queue/topic it gets.
 *
 * @example
 * ```ts
 * const options: SetupOptions = { leaseMs: 1000, maxDeliveries: 2 };
 * ```
 */
export interface SetupOptions {
  /**
   * Broker lease length (visibility timeout, lock duration, ack deadline). The harness
   * may round it to what the broker supports and reports the result in
   * {@link HarnessSetup.leaseMs}. @default the adapter's test default
   */
  leaseMs?: number;
  /** Broker-side max deliveries before its own dead-lettering, where configurable. */
  maxDeliveries?: number;
  /** Ordered queue / keyed ordering wanted (SQS FIFO, sessions, ...). */
  ordered?: boolean;
  /** Partitions (Kafka). */
  partitions?: number;
}

/**
 * One provisioned, isolated destination for one test.
 *
 * @example
 * ```ts
 * const setup = await harness.setup({ name: 'ack-lost-3-a1b2c3', leaseMs: 2000 });
 * await setup.publish([{ id: 'm-1', body: {} }]);
 * const consumerBroker = setup.brokerConfig();
 * await setup.teardown();
 * ```
 */
export interface HarnessSetup {
  /** Publishes in array order; the same ID may appear several times (producer duplicates). */
  publish(messages: readonly PublishedMessage[]): Promise<void>;
  /**
   * The `broker` section for a consumer of this destination; `overrides` are merged in.
   * For `crossProcess` brokers it must survive `JSON.stringify` (the child process gets it).
   */
  brokerConfig(overrides?: Record<string, unknown>): BrokerConfig;
  /** What reached the dead-letter destination, with reasons. */
  deadLetters(): Promise<Array<{ id?: string; reason: string }>>;
  /**
   * Messages not yet settled (ready + in flight). `undefined` is an error (the scenario
   * fails) unless the harness declares {@link AdapterHarness.backlogUnknown}.
   */
  backlog(): Promise<number | undefined>;
  /** The lease actually configured, when it differs from (or was not) requested. */
  leaseMs?: number;
  /**
   * Make the broker hand out an unacked message again the way it would after a lost ack
   * (let the lease lapse or set it to 0; RabbitMQ: close the delivering channel). When
   * absent the scenarios wait for the lease to lapse.
   */
  forceRedelivery?(id: string): Promise<void>;
  /** Server-side cut of the client's connections (feature `serverSideDisconnect`). */
  disconnect?(): Promise<void>;
  /** Restart the broker (feature `brokerRestart`). */
  restart?(): Promise<void>;
  /** Holds a consumer's connections at connect (feature `connectHold`); see {@link ConnectHold}. */
  holdConnections?(): Promise<ConnectHold>;
  teardown(): Promise<void>;
}

/**
 * A store the harness built, and how to build it again in another process.
 *
 * @example
 * ```ts
 * const store = new PostgresStore({ connectionString, schema });
 * await store.migrate();
 * const handle: StoreHandle = { store, childConfig: { connectionString, schema }, cleanup: () => store.close() };
 * ```
 */
export interface StoreHandle {
  store: IdempotencyStore<SqlClient>;
  /**
   * Closes the store. `passed` tells whether every scenario that used it passed: drop
   * what the harness created (its schema) only then, and keep it as evidence otherwise.
   */
  cleanup(outcome?: { passed: boolean }): Promise<void>;
  /**
   * JSON that {@link AdapterHarness.childModule}'s default export turns into the same
   * store (same database and schema) in a child process. Needed for `crossProcess`.
   */
  childConfig?: unknown;
}

/**
 * What the child process passes to the default export of {@link AdapterHarness.childModule}.
 *
 * @example
 * ```ts
 * const input: ChildModuleInput = { brokerConfig: { type: 'rabbitmq', url, queue }, storeConfig: { connectionString, schema } };
 * ```
 */
export interface ChildModuleInput {
  /** `setup.brokerConfig(...)` as the parent built it, through JSON. */
  brokerConfig: BrokerConfig;
  /** {@link StoreHandle.childConfig} of the parent's store. */
  storeConfig: unknown;
}

/**
 * What the default export of {@link AdapterHarness.childModule} resolves with.
 *
 * @example
 * ```ts
 * const resources: ChildModuleResources = { store: new PostgresStore(storeConfig) };
 * ```
 */
export interface ChildModuleResources {
  store: IdempotencyStore<SqlClient>;
  /** Replaces the input's broker config (for example to add a non-JSON option). @default input.brokerConfig */
  brokerConfig?: BrokerConfig;
  /** Loads the adapter. @default loadAdapterModule(brokerConfig.type) from @oncely/core */
  adapterModule?: AdapterModule;
  /** ID strategy of the child's consumer. @default the parent's, when it is not a function; else the adapter's */
  idStrategy?: IdStrategy;
}

/**
 * Type of the default export of {@link AdapterHarness.childModule}.
 *
 * @example
 * ```js
 * // conformanceChild.mjs
 * export default async ({ storeConfig }) => ({ store: new PostgresStore(storeConfig) });
 * ```
 */
export type ChildModuleFactory = (
  input: ChildModuleInput,
) => Promise<ChildModuleResources> | ChildModuleResources;

/**
 * What an adapter's test passes to `runAdapterConformance`, through `createHarness`.
 * The suite calls `createHarness()` once per run (in `beforeAll`), `setup()` once per
 * scenario, and builds every consumer itself:
 * `new Consumer(config, (await loadAdapter()).createAdapter(setup.brokerConfig(), ...))`,
 * with the adapter wrapped in a fault injector.
 *
 * @example
 * ```ts
 * const harness: AdapterHarness = {
 *   brokerType: 'rabbitmq',
 *   databaseAddress: { host: '127.0.0.1', port: 5432 },
 *   async createStore() { ... },
 *   async createStoreVia(port) { ... },
 *   async setup({ name, leaseMs }) { ... },
 *   childModule: new URL('./child.mjs', import.meta.url).href,
 * };
 * ```
 */
export interface AdapterHarness {
  /** Broker type for the consumer config (and the adapter package `loadAdapterModule` loads). */
  brokerType: string;
  /** Provisions an isolated destination for one scenario; `name` is unique per scenario run. */
  setup(test: { name: string } & SetupOptions): Promise<HarnessSetup>;
  /**
   * The store under test: real PostgreSQL, migrated, in a schema of its own. The suite
   * calls it once per run and writes its effect tables (in a schema it creates and
   * drops) through that store's transactions.
   */
  createStore(): Promise<StoreHandle>;
  /**
   * The same store (same database and schema) reached through the suite's TCP proxy at
   * 127.0.0.1:`port` (store-outage scenario 14). Required by scenario 14. Its handle's
   * `cleanup` only closes that store: the schema belongs to `createStore`'s.
   */
  createStoreVia?(port: number): Promise<StoreHandle>;
  /** Where the real PostgreSQL listens, for the TCP proxy. Required by scenario 14. */
  databaseAddress?: { host: string; port: number };
  /**
   * For `crossProcess` scenarios (5, 6): an absolute path or file URL of a plain
   * JavaScript ES module (no TypeScript: the child runs on bare Node) whose default
   * export is a {@link ChildModuleFactory}.
   */
  childModule?: string;
  /** ID strategy the suite's consumers use. @default the adapter's defaultIdStrategy */
  idStrategy?: IdStrategy;
  /** Loads the adapter module. @default loadAdapterModule(brokerType) from @oncely/core */
  loadAdapter?(): Promise<AdapterModule>;
  /**
   * Why this broker cannot count unsettled messages. Only then may `setup.backlog()`
   * answer `undefined` (the backlog checks are skipped); otherwise `undefined` fails the
   * scenario, so a harness that lost track of its queue cannot pass silently.
   * @default undefined (the harness counts its backlog)
   */
  backlogUnknown?: string;
  /** Called once after the last scenario. */
  close?(): Promise<void>;
  /**
   * The SQL dialect of the store's transactions, for the suite's effect tables and probes
   * (a MySQL store passes MySQL's). @default PostgreSQL's
   */
  sql?: SqlDialect;
}
