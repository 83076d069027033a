import { type BrokerConfig, ConfigError } from '@oncely/core';

/**
 * The `broker` section for Kafka: `{ type: 'kafka', brokers, topic, ... }`. Every field
 * but `type`, `brokers` and `topic` is optional, and `brokers` too when you give your own
 * client (`kafka`). JSON-serialisable (but `kafka`), so it can come from `loadConfig()`
 * (environment variables or a file).
 *
 * @example
 * ```ts
 * const broker: KafkaBrokerConfig = {
 *   type: 'kafka',
 *   brokers: ['127.0.0.1:9092'],
 *   topic: 'payments',
 *   groupId: 'payments-service',
 *   partitionsConsumedConcurrently: 8,
 * };
 * ```
 */
export type KafkaBrokerConfig = KafkaBrokerOptions & { type: 'kafka' };

/**
 * The Kafka options of the `broker` section, without `type` (what `createKafkaConsumer`
 * takes as `broker`).
 *
 * @example
 * ```ts
 * const options: KafkaBrokerOptions = { brokers: ['127.0.0.1:9092'], topic: 'payments', fromBeginning: true };
 * ```
 */
// A type alias, not an interface: it must stay assignable to BrokerConfig's index signature.
export type KafkaBrokerOptions = {
  /**
   * Bootstrap brokers, `host:port`. A comma-separated string is accepted too (environment
   * variables). Required unless `kafka` (your own client) is given.
   */
  brokers?: string[] | string;
  /** The topic to consume. */
  topic: string;
  /**
   * The Kafka client library the adapter runs on: `kafkajs` (a peer dependency, no
   * release since 2023) or `platformatic` (`@platformatic/kafka`, maintained; an optional
   * peer dependency, Node >= 22.22 or >= 24.6). See the README for the differences.
   * @default 'kafkajs'
   */
  client?: KafkaClientName;
  /** Consumer group. @default the consumer's `name` */
  groupId?: string;
  /** kafkajs client ID. @default `oncely-<consumer name>` */
  clientId?: string;
  /**
   * Group session timeout: a member that sends no heartbeat for this long is removed and
   * its partitions go to another member. kafkajs sends heartbeats only when asked, so
   * Oncely's lease keeper sends them while a handler runs. The broker bounds it by
   * `group.min.session.timeout.ms` / `group.max.session.timeout.ms`. @default 30000
   */
  sessionTimeout?: number;
  /** Minimum spacing of heartbeats (kafkajs throttles to it). @default min(3000, sessionTimeout / 10) */
  heartbeatInterval?: number;
  /** How long the group waits for members to rejoin during a rebalance. @default 60000 */
  rebalanceTimeout?: number;
  /**
   * Partitions processed at once (kafkajs `partitionsConsumedConcurrently`). Records of
   * one partition always run one at a time, in offset order. @default the consumer's `concurrency`
   */
  partitionsConsumedConcurrently?: number;
  /** Where dead-lettered records are produced. @default `<topic>.dlq` */
  deadLetterTopic?: string;
  /** Create the dead-letter topic at start when it is missing (same partition count as `topic`). @default true */
  createDeadLetterTopic?: boolean;
  /**
   * Where a group without a committed offset starts: the oldest record (true) or only
   * records produced after it joined (false, Kafka's `auto.offset.reset=latest`). @default false
   */
  fromBeginning?: boolean;
  /** Longest a fetch waits on the broker for new records; also bounds how fast stop and rebalances react. @default 1000 */
  maxWaitTimeInMs?: number;
  /** Bytes fetched per partition per request (kafkajs default 1 MiB). */
  maxBytesPerPartition?: number;
  /**
   * While a handler runs, done offsets are committed at least this often (they are
   * always committed when a batch ends and on stop). @default 5000
   */
  commitIntervalMs?: number;
  /**
   * How long `close()` waits for running handlers (after the core's own stop deadline)
   * before it abandons them and leaves the group; an abandoned record is not committed
   * and goes to the next owner. Also bounds each client's disconnect. @default 30000
   */
  closeTimeoutMs?: number;
  /** kafkajs connection timeout, ms. @default 3000 */
  connectionTimeout?: number;
  /** kafkajs request timeout, ms. @default 30000 */
  requestTimeout?: number;
  /** TLS: `true` or Node `tls.connect` options (passed to kafkajs). */
  ssl?: boolean | Record<string, unknown>;
  /** SASL options passed to kafkajs (`{ mechanism, username, password }`, ...). */
  sasl?: Record<string, unknown>;
  /**
   * kafkajs retry settings of the client (`{ retries, initialRetryTime, maxRetryTime,
   * factor, multiplier }`). After `retries` the consumer crashes and kafkajs restarts it.
   * @default kafkajs' (`retries: 5`, `initialRetryTime: 300`, `maxRetryTime: 30000`)
   */
  retry?: KafkaRetryOptions;
  /** The consumer's rack (KIP-392): fetch from the nearest replica when the broker's `replica.selector.class` allows it. */
  rackId?: string;
  /** Least bytes the broker gathers before it answers a fetch (up to `maxWaitTimeInMs`). @default 1 */
  minBytes?: number;
  /** Most bytes of one fetch response (all partitions; the broker's `fetch.max.bytes` caps it). @default 10485760 */
  maxBytes?: number;
  /** kafkajs' own log level, logged through the consumer's logger. @default 'warn' */
  logLevel?: 'nothing' | 'error' | 'warn' | 'info' | 'debug';
  /**
   * Your own KafkaJS client (a `new Kafka(...)`, or a KafkaJS-compatible one) instead of
   * one built from `brokers`, `clientId`, `ssl`, `sasl`, `retry`, the timeouts and
   * `logLevel` (which are then ignored). `brokers` becomes optional. Not expressible in
   * JSON config: pass it in code.
   */
  kafka?: KafkaClientLike;
  /**
   * Your own @platformatic/kafka setup: factories the adapter (and `send`'s producer,
   * `createKafkaProducer`, `findDeadLetters`, `diagnose`) builds its clients with instead
   * of `new Consumer(options)`, `new Producer(options)` and `new Admin(options)`. Each is
   * called with the options the adapter would use (`clientId`, `bootstrapBrokers`, the
   * timeouts, `sasl`, `tls`, ... from this section, plus the group's or the producer's
   * own) and returns a client of that kind built from them, with your additions: a SASL
   * credential provider or custom authenticator, TLS options, metrics, your own brokers.
   * Keep the adapter's `groupId`, the consumer's and producer's options and the default
   * (Buffer) serialisers. `client` defaults to `'platformatic'` with it and `brokers`
   * becomes optional (the factories then give `bootstrapBrokers`). Not expressible in JSON
   * config: pass it in code.
   *
   * @example
   * ```ts
   * import { Admin, Consumer, Producer } from '@platformatic/kafka';
   * const sasl = { mechanism: 'OAUTHBEARER', token: () => tokens.current() } as const;
   * const platformatic = {
   *   consumer: (options) => new Consumer({ ...options, sasl }),
   *   producer: (options) => new Producer({ ...options, sasl }),
   *   admin: (options) => new Admin({ ...options, sasl }),
   * } satisfies PlatformaticClientFactories;
   * ```
   */
  platformatic?: PlatformaticClientFactories;
};

/**
 * Options the adapter passes to your {@link PlatformaticClientFactories}: those of
 * @platformatic/kafka's `Consumer`, `Producer` or `Admin` (only their shape is named here,
 * so that kafkajs users need not have @platformatic/kafka's types). Spread them into the
 * constructor of the kind asked for.
 */
export type PlatformaticClientOptions = {
  clientId: string;
  bootstrapBrokers: string[];
  [option: string]: any;
};

/** {@link PlatformaticClientOptions} of a consumer: a `groupId` too. */
export type PlatformaticConsumerOptions = PlatformaticClientOptions & { groupId: string };

/**
 * Factories of @platformatic/kafka clients (`broker.platformatic`): each returns a new
 * client of its kind built from the options given (see `KafkaBrokerOptions.platformatic`).
 * The adapter closes what they return.
 */
export interface PlatformaticClientFactories {
  /** A `new Consumer(options)` of @platformatic/kafka (a group member, or a dead-letter scan's). */
  consumer(options: PlatformaticConsumerOptions): unknown;
  /** A `new Producer(options)` of @platformatic/kafka (dead letters, `send`, the outbox producer). */
  producer(options: PlatformaticClientOptions): unknown;
  /** A `new Admin(options)` of @platformatic/kafka. */
  admin(options: PlatformaticClientOptions): unknown;
}

/** The client libraries the adapter runs on. */
export type KafkaClientName = 'kafkajs' | 'platformatic';

const CLIENTS: readonly KafkaClientName[] = ['kafkajs', 'platformatic'];

/** kafkajs' `RetryOptions`. */
export interface KafkaRetryOptions {
  maxRetryTime?: number;
  initialRetryTime?: number;
  factor?: number;
  multiplier?: number;
  retries?: number;
}

/** What the adapter uses of a KafkaJS client: its three factories. */
export interface KafkaClientLike {
  consumer(config: never): unknown;
  producer(config?: never): unknown;
  admin(config?: never): unknown;
}

/**
 * The `broker` section with every default applied (what the adapter runs with).
 *
 * @example
 * ```ts
 * const { groupId, deadLetterTopic } = resolveKafkaConfig({ type: 'kafka', brokers: ['k:9092'], topic: 'orders' }, 'billing');
 * // groupId 'billing', deadLetterTopic 'orders.dlq'
 * ```
 */
export interface ResolvedKafkaConfig {
  brokers: string[];
  topic: string;
  client: KafkaClientName;
  groupId: string;
  clientId: string;
  sessionTimeout: number;
  heartbeatInterval: number;
  rebalanceTimeout: number;
  partitionsConsumedConcurrently: number | undefined;
  deadLetterTopic: string;
  createDeadLetterTopic: boolean;
  fromBeginning: boolean;
  maxWaitTimeInMs: number;
  maxBytesPerPartition: number | undefined;
  commitIntervalMs: number;
  closeTimeoutMs: number;
  connectionTimeout: number;
  requestTimeout: number;
  ssl: boolean | Record<string, unknown> | undefined;
  sasl: Record<string, unknown> | undefined;
  retry: KafkaRetryOptions | undefined;
  rackId: string | undefined;
  minBytes: number | undefined;
  maxBytes: number | undefined;
  logLevel: 'nothing' | 'error' | 'warn' | 'info' | 'debug';
  kafka: KafkaClientLike | undefined;
  platformatic: PlatformaticClientFactories | undefined;
}

const KNOWN = new Set([
  'type',
  'brokers',
  'topic',
  'client',
  'groupId',
  'clientId',
  'sessionTimeout',
  'heartbeatInterval',
  'rebalanceTimeout',
  'partitionsConsumedConcurrently',
  'deadLetterTopic',
  'createDeadLetterTopic',
  'fromBeginning',
  'maxWaitTimeInMs',
  'maxBytesPerPartition',
  'commitIntervalMs',
  'closeTimeoutMs',
  'connectionTimeout',
  'requestTimeout',
  'ssl',
  'sasl',
  'retry',
  'rackId',
  'minBytes',
  'maxBytes',
  'logLevel',
  'kafka',
  'platformatic',
]);

const LOG_LEVELS = ['nothing', 'error', 'warn', 'info', 'debug'] as const;
const RETRY_FIELDS = ['maxRetryTime', 'initialRetryTime', 'factor', 'multiplier', 'retries'] as const;

// Kafka topic names: 1-249 characters of [a-zA-Z0-9._-].
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/;

/**
 * Checks the `broker` section and fills in defaults. Throws a `ConfigError` naming the
 * first offending field (`broker.topic`, ...).
 *
 * @example
 * ```ts
 * const resolved = resolveKafkaConfig({ type: 'kafka', brokers: ['localhost:9092'], topic: 'orders' }, 'orders-consumer');
 * resolved.deadLetterTopic; // 'orders.dlq'
 * ```
 */
export function resolveKafkaConfig(broker: BrokerConfig, consumerName: string): ResolvedKafkaConfig {
  if (typeof broker !== 'object' || broker === null) throw new ConfigError('broker', 'must be an object');
  if (broker.type !== 'kafka')
    throw new ConfigError('broker.type', `must be 'kafka', got ${show(broker.type)}`);
  for (const field of Object.keys(broker)) {
    if (!KNOWN.has(field)) {
      throw new ConfigError(`broker.${field}`, `is not a Kafka option (known: ${[...KNOWN].join(', ')})`);
    }
  }
  const b = broker as Partial<KafkaBrokerOptions>;
  if (
    b.kafka !== undefined &&
    (typeof b.kafka !== 'object' ||
      b.kafka === null ||
      typeof b.kafka.consumer !== 'function' ||
      typeof b.kafka.producer !== 'function' ||
      typeof b.kafka.admin !== 'function')
  ) {
    throw new ConfigError(
      'broker.kafka',
      'must be a KafkaJS client (with consumer(), producer() and admin())',
    );
  }
  checkPlatformaticFactories(b.platformatic);
  if (b.kafka !== undefined && b.platformatic !== undefined) {
    throw new ConfigError(
      'broker.platformatic',
      'cannot be given with broker.kafka (a KafkaJS client): give one client library, not both',
    );
  }
  const injected = b.kafka !== undefined || b.platformatic !== undefined;
  const brokers =
    typeof b.brokers === 'string'
      ? b.brokers.split(',').map((s) => s.trim())
      : b.brokers === undefined && injected
        ? []
        : b.brokers;
  if (!Array.isArray(brokers) || (brokers.length === 0 && !injected)) {
    throw new ConfigError(
      'broker.brokers',
      `must be a non-empty list of 'host:port', got ${show(b.brokers)}`,
    );
  }
  for (const address of brokers) {
    if (typeof address !== 'string' || !/^[^\s:]+:\d{1,5}$/.test(address)) {
      throw new ConfigError('broker.brokers', `entries must look like 'host:port', got ${show(address)}`);
    }
  }
  if (typeof b.topic !== 'string' || !TOPIC_NAME.test(b.topic)) {
    throw new ConfigError(
      'broker.topic',
      `must be a Kafka topic name ([a-zA-Z0-9._-]{1,249}), got ${show(b.topic)}`,
    );
  }
  if (b.client !== undefined && !CLIENTS.includes(b.client)) {
    throw new ConfigError('broker.client', `must be one of ${CLIENTS.join(', ')}, got ${show(b.client)}`);
  }
  if (b.client === 'platformatic' && b.kafka !== undefined) {
    throw new ConfigError(
      'broker.kafka',
      "is a KafkaJS client and cannot be used with broker.client 'platformatic' (give brokers, or your own @platformatic/kafka setup as broker.platformatic)",
    );
  }
  if (b.client === 'kafkajs' && b.platformatic !== undefined) {
    throw new ConfigError(
      'broker.platformatic',
      "holds @platformatic/kafka factories and cannot be used with broker.client 'kafkajs' (give broker.kafka for your own KafkaJS client)",
    );
  }
  const client = b.client ?? (b.platformatic !== undefined ? 'platformatic' : 'kafkajs');
  if (client === 'platformatic' && !nodeRunsPlatformatic(process.versions.node)) {
    // It loads on older Node, but its engines say >= 22.22: not a runtime it is tested on.
    throw new ConfigError(
      'broker.client',
      `'platformatic'${b.client === undefined ? ' (implied by broker.platformatic)' : ''} needs Node >= 22.22 (@platformatic/kafka's engines); this is ${process.version}`,
    );
  }
  optionalString(b.groupId, 'broker.groupId');
  optionalString(b.clientId, 'broker.clientId');
  if (
    b.deadLetterTopic !== undefined &&
    (typeof b.deadLetterTopic !== 'string' || !TOPIC_NAME.test(b.deadLetterTopic))
  ) {
    throw new ConfigError(
      'broker.deadLetterTopic',
      `must be a Kafka topic name, got ${show(b.deadLetterTopic)}`,
    );
  }
  if (b.deadLetterTopic === b.topic) {
    throw new ConfigError(
      'broker.deadLetterTopic',
      'must differ from broker.topic (dead letters would be consumed again)',
    );
  }
  integer(b.sessionTimeout, 1000, 3_600_000, 'broker.sessionTimeout');
  integer(b.heartbeatInterval, 50, 3_600_000, 'broker.heartbeatInterval');
  integer(b.rebalanceTimeout, 1000, 3_600_000, 'broker.rebalanceTimeout');
  integer(b.partitionsConsumedConcurrently, 1, 10_000, 'broker.partitionsConsumedConcurrently');
  integer(b.maxWaitTimeInMs, 10, 60_000, 'broker.maxWaitTimeInMs');
  integer(b.maxBytesPerPartition, 1024, 1_073_741_824, 'broker.maxBytesPerPartition');
  integer(b.commitIntervalMs, 0, 3_600_000, 'broker.commitIntervalMs');
  integer(b.closeTimeoutMs, 0, 3_600_000, 'broker.closeTimeoutMs');
  integer(b.connectionTimeout, 100, 600_000, 'broker.connectionTimeout');
  integer(b.requestTimeout, 100, 600_000, 'broker.requestTimeout');
  integer(b.minBytes, 1, 1_073_741_824, 'broker.minBytes');
  integer(b.maxBytes, 1024, 2_147_483_647, 'broker.maxBytes');
  optionalString(b.rackId, 'broker.rackId');
  if (b.logLevel !== undefined && !(LOG_LEVELS as readonly unknown[]).includes(b.logLevel)) {
    throw new ConfigError(
      'broker.logLevel',
      `must be one of ${LOG_LEVELS.join(', ')}, got ${show(b.logLevel)}`,
    );
  }
  if (b.retry !== undefined) {
    if (typeof b.retry !== 'object' || b.retry === null) {
      throw new ConfigError(
        'broker.retry',
        'must be kafkajs retry options ({ retries, initialRetryTime, ... })',
      );
    }
    for (const [field, value] of Object.entries(b.retry)) {
      if (!(RETRY_FIELDS as readonly string[]).includes(field)) {
        throw new ConfigError(
          `broker.retry.${field}`,
          `is not a kafkajs retry option (known: ${RETRY_FIELDS.join(', ')})`,
        );
      }
      if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
        throw new ConfigError(`broker.retry.${field}`, `must be a number >= 0, got ${show(value)}`);
      }
    }
  }
  optionalBoolean(b.fromBeginning, 'broker.fromBeginning');
  optionalBoolean(b.createDeadLetterTopic, 'broker.createDeadLetterTopic');
  if (b.ssl !== undefined && typeof b.ssl !== 'boolean' && (typeof b.ssl !== 'object' || b.ssl === null)) {
    throw new ConfigError('broker.ssl', `must be true, false or TLS options, got ${show(b.ssl)}`);
  }
  if (b.sasl !== undefined && (typeof b.sasl !== 'object' || b.sasl === null)) {
    throw new ConfigError('broker.sasl', `must be an object such as { mechanism, username, password }`);
  }
  const sessionTimeout = b.sessionTimeout ?? 30_000;
  const heartbeatInterval =
    b.heartbeatInterval ?? Math.max(50, Math.min(3000, Math.floor(sessionTimeout / 10)));
  if (heartbeatInterval >= sessionTimeout) {
    throw new ConfigError(
      'broker.heartbeatInterval',
      `must be below broker.sessionTimeout (${sessionTimeout})`,
    );
  }
  return {
    brokers,
    topic: b.topic,
    client,
    groupId: b.groupId ?? consumerName,
    clientId: b.clientId ?? `oncely-${consumerName}`,
    sessionTimeout,
    heartbeatInterval,
    rebalanceTimeout: b.rebalanceTimeout ?? 60_000,
    partitionsConsumedConcurrently: b.partitionsConsumedConcurrently,
    deadLetterTopic: b.deadLetterTopic ?? `${b.topic}.dlq`,
    createDeadLetterTopic: b.createDeadLetterTopic ?? true,
    fromBeginning: b.fromBeginning ?? false,
    maxWaitTimeInMs: b.maxWaitTimeInMs ?? 1000,
    maxBytesPerPartition: b.maxBytesPerPartition,
    commitIntervalMs: b.commitIntervalMs ?? 5000,
    closeTimeoutMs: b.closeTimeoutMs ?? 30_000,
    connectionTimeout: b.connectionTimeout ?? 3000,
    requestTimeout: b.requestTimeout ?? 30_000,
    ssl: b.ssl,
    sasl: b.sasl,
    retry: b.retry,
    rackId: b.rackId,
    minBytes: b.minBytes,
    maxBytes: b.maxBytes,
    logLevel: b.logLevel ?? 'warn',
    kafka: b.kafka,
    platformatic: b.platformatic,
  };
}

/**
 * `broker.platformatic`: an object of three factories. A client where factories are
 * expected (a `Consumer`, or a KafkaJS `Kafka`, which has factories of its own kind) is
 * named: the factories' results are checked when they are called (see
 * adapter/platformaticFactories.ts).
 */
function checkPlatformaticFactories(value: unknown): void {
  if (value === undefined) return;
  const expected =
    'must be @platformatic/kafka factories { consumer(options), producer(options), admin(options) }, each returning a new client of that kind built from the options given';
  if (typeof value !== 'object' || value === null) {
    throw new ConfigError('broker.platformatic', `${expected}; got ${show(value)}`);
  }
  const kind = (value as { type?: unknown }).type;
  if (typeof kind === 'string' && typeof (value as { clientId?: unknown }).clientId === 'string') {
    throw new ConfigError(
      'broker.platformatic',
      `${expected}; got a @platformatic/kafka ${kind} itself (the adapter makes several clients of each kind, with options of its own: give a function that makes one)`,
    );
  }
  if (typeof (value as { logger?: unknown }).logger === 'function') {
    throw new ConfigError(
      'broker.platformatic',
      `${expected}; got what looks like a KafkaJS client (give it as broker.kafka)`,
    );
  }
  const missing = ['consumer', 'producer', 'admin'].filter(
    (name) => typeof (value as Record<string, unknown>)[name] !== 'function',
  );
  if (missing.length > 0) {
    throw new ConfigError('broker.platformatic', `${expected}; ${missing.join(', ')} missing`);
  }
}

/** @platformatic/kafka's engines: `>= 22.22.0 || >= 24.6.0`, so any Node from 22.22 on. */
export function nodeRunsPlatformatic(version: string): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  return major > 22 || (major === 22 && minor >= 22);
}

function integer(value: unknown, min: number, max: number, field: string): void {
  if (value === undefined) return;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${show(value)}`);
  }
}

function optionalString(value: unknown, field: string): void {
  if (value !== undefined && (typeof value !== 'string' || value.trim() === '')) {
    throw new ConfigError(field, `must be a non-empty string, got ${show(value)}`);
  }
}

function optionalBoolean(value: unknown, field: string): void {
  if (value !== undefined && typeof value !== 'boolean') {
    throw new ConfigError(field, `must be true or false, got ${show(value)}`);
  }
}

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

// Adds this adapter's section to the `broker` union of ConsumerConfig (declaration merging),
// so `createConsumer({ broker: { type: 'kafka', ... } })` is type-checked.
declare module '@oncely/core' {
  interface BrokerOptionsByType {
    kafka: KafkaBrokerConfig;
  }
}
