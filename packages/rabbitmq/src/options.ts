import { ConfigError } from '@oncely/core';

/** RabbitMQ queue types the adapter knows how to count deliveries on. */
export type RabbitMqQueueType = 'classic' | 'quorum';

/**
 * How a failed message is retried.
 *
 * - `'topology'`: a copy goes to a per-delay TTL queue that dead-letters it back to the
 *   work queue; the copy is confirmed by the broker before the original is acked. Honors
 *   the backoff delay; reorders messages.
 * - `'requeue'`: `basic.reject(requeue)`: back to the queue at once, no delay (a hot
 *   redelivery loop until `maxAttempts`), no extra queues.
 */
export type RabbitMqRetryMode = 'topology' | 'requeue';

/**
 * The queues and exchanges the adapter uses. {@link assertTopology} declares them; the
 * consumer declares them at start unless `assertQueue` is false.
 */
export interface RabbitMqTopologyOptions {
  /** The work queue to consume. */
  queue: string;
  /**
   * Type of the work queue (and of the dead-letter and delay queues declared for it).
   * Decides how deliveries are counted: quorum queues count them (`x-delivery-count`),
   * classic queues do not. @default 'classic'
   */
  queueType?: RabbitMqQueueType;
  /** Exchange dead letters are published to. @default `${queue}.dlx` */
  deadLetterExchange?: string;
  /** Queue bound to the dead-letter exchange (declared by assertTopology). @default `${queue}.dlq` */
  deadLetterQueue?: string;
  /** Routing key dead letters are published with. @default the work queue's name */
  deadLetterRoutingKey?: string;
  /**
   * Quorum queues only: `x-delivery-limit` of the work queue, the broker's own poison
   * limit. Set it well above `maxAttempts` so the consumer, which knows the reason,
   * dead-letters first (on RabbitMQ before 4.3 releases at stop and during store outages
   * count too). @default not set (RabbitMQ 4.0+ then applies 20)
   */
  deliveryLimit?: number;
  /**
   * Fixed retry delays (ms), one TTL queue each. A retry waits for the smallest delay
   * at least as long as the backoff asked for (or the largest). When unset, delays are
   * rounded up to a 1-1.2-1.5-2-2.5-3-4-5-6-8 ladder and their queues are declared on
   * demand (with `x-expires`, so unused ones disappear). Required when `assertQueue` is
   * false and `retry` is `'topology'`.
   */
  retryDelaysMs?: readonly number[];
  /** Extra arguments of the work queue (`x-max-length`, ...), used when declaring it. */
  queueArguments?: Readonly<Record<string, unknown>>;
  /**
   * Declare the work queue with `x-single-active-consumer`: of all consumers only one
   * receives at a time (the others take over when it goes), which keeps the queue's
   * order across competing consumers. Use `concurrency: 1` too for strict order.
   * @default false
   */
  singleActiveConsumer?: boolean;
  /**
   * Consume what producers publish to exchanges: each binding declares its exchange
   * (durable; `type` default `'topic'`) and binds the work queue to it with the routing
   * key (topic patterns like `orders.*.created`) or, for a headers exchange, `arguments`.
   * @default [] (producers publish to the queue itself)
   */
  bindings?: readonly RabbitMqBinding[];
}

/** One exchange binding of the work queue (see `bindings`). */
export interface RabbitMqBinding {
  exchange: string;
  /** @default 'topic' */
  type?: 'direct' | 'topic' | 'fanout' | 'headers';
  /** @default '' (fanout and headers exchanges ignore it) */
  routingKey?: string;
  /** Binding arguments (headers exchanges: `{ 'x-match': 'all', region: 'eu' }`). */
  arguments?: Readonly<Record<string, unknown>>;
}

/**
 * The `broker` section for `{ type: 'rabbitmq' }`.
 *
 * @example
 * ```ts
 * const broker: RabbitMqBrokerOptions = { type: 'rabbitmq', url: 'amqp://localhost', queue: 'payments', queueType: 'quorum' };
 * ```
 */
export interface RabbitMqBrokerOptions extends RabbitMqTopologyOptions {
  type?: 'rabbitmq';
  /**
   * `amqp://user:pass@host:5672/vhost` or `amqps://...`; several (a cluster's nodes) as
   * an array: each connect tries them in turn, starting after the last one used.
   */
  url: string | readonly string[];
  /**
   * Unacknowledged deliveries the broker may push (`basic.qos`, per consumer). Deliveries
   * beyond the consumer's free handler slots wait in the adapter, unacked (and count
   * toward `consumer_timeout`). @default the consumer's `concurrency`
   */
  prefetch?: number;
  /** @default 'topology' */
  retry?: RabbitMqRetryMode;
  /**
   * Declare the work queue, dead-letter exchange/queue (and delay queues on demand) at
   * start. When false they are only checked, and must exist. @default true
   */
  assertQueue?: boolean;
  /**
   * The server's `consumer_timeout` in ms (it cannot be read over AMQP), or `false` when
   * the server has it disabled. A handler that can outlive it is a configuration error
   * reported at start and by `diagnose()`. @default assumed 1800000 (RabbitMQ's default), checked as a warning
   */
  consumerTimeoutMs?: number | false;
  /** Shown in the management UI and `rabbitmqctl list_connections`. @default `oncely:${consumer name}:${queue}` */
  connectionName?: string;
  /** AMQP heartbeat in seconds; 0 disables it. @default the server's suggestion (60) */
  heartbeatSeconds?: number;
  /** Reconnect backoff after connection or channel loss. @default { initialMs: 100, maxMs: 30000 } */
  reconnect?: { initialMs?: number; maxMs?: number };
  /** How long to wait for a publisher confirm (retry copies, dead letters). @default 30000 */
  confirmTimeoutMs?: number;
  /** Passed to amqplib's `connect` (TLS options and the like). */
  socketOptions?: Readonly<Record<string, unknown>>;
  /**
   * Consumer priority (`x-priority`): the broker delivers to the highest-priority
   * consumers that have prefetch room, lower ones get messages only when those are
   * full or gone. @default unset (0)
   */
  consumerPriority?: number;
  /** Further `basic.consume` arguments (`x-stream-offset`, ...). @default {} */
  consumeArguments?: Readonly<Record<string, unknown>>;
}

/** Topology names with every default filled in. */
export interface ResolvedTopology {
  queue: string;
  queueType: RabbitMqQueueType;
  deadLetterExchange: string;
  deadLetterQueue: string;
  deadLetterRoutingKey: string;
  deliveryLimit: number | undefined;
  retryDelaysMs: readonly number[] | undefined;
  queueArguments: Readonly<Record<string, unknown>>;
  singleActiveConsumer: boolean;
  bindings: readonly RabbitMqBinding[];
}

/** Broker options with every default filled in. */
export interface ResolvedOptions extends ResolvedTopology {
  /** The first of `urls`. */
  url: string;
  urls: readonly string[];
  consumerPriority: number | undefined;
  consumeArguments: Readonly<Record<string, unknown>>;
  prefetch: number | undefined;
  retry: RabbitMqRetryMode;
  assertQueue: boolean;
  consumerTimeoutMs: number | false | undefined;
  connectionName: string | undefined;
  heartbeatSeconds: number | undefined;
  reconnectInitialMs: number;
  reconnectMaxMs: number;
  confirmTimeoutMs: number;
  socketOptions: Readonly<Record<string, unknown>>;
}

const TOPOLOGY_FIELDS = [
  'queue',
  'queueType',
  'deadLetterExchange',
  'deadLetterQueue',
  'deadLetterRoutingKey',
  'deliveryLimit',
  'retryDelaysMs',
  'queueArguments',
  'singleActiveConsumer',
  'bindings',
] as const;

const BROKER_FIELDS = new Set<string>([
  'type',
  'url',
  'prefetch',
  'retry',
  'assertQueue',
  'consumerTimeoutMs',
  'connectionName',
  'heartbeatSeconds',
  'reconnect',
  'confirmTimeoutMs',
  'socketOptions',
  'consumerPriority',
  'consumeArguments',
  ...TOPOLOGY_FIELDS,
]);

/** Longest queue/exchange name AMQP 0-9-1 allows (a short string: 255 bytes). */
const MAX_NAME_BYTES = 255;
/** Room a delay queue's suffix needs (`.delay.` + up to 10 digits). */
const DELAY_SUFFIX_BYTES = 17;

/**
 * Checks the `broker` section and fills in defaults. Throws a `ConfigError` naming the
 * offending field (`broker.queue`, `broker.prefetch`, ...).
 *
 * @example
 * ```ts
 * parseBrokerOptions({ type: 'rabbitmq', url: 'amqp://localhost', queue: 'payments' });
 * ```
 */
export function parseBrokerOptions(broker: Readonly<Record<string, unknown>>): ResolvedOptions {
  const label = (field: string) => `broker.${field}`;
  if (typeof broker !== 'object' || broker === null) throw new ConfigError('broker', 'must be an object');
  for (const field of Object.keys(broker)) {
    if (!BROKER_FIELDS.has(field)) {
      throw new ConfigError(
        label(field),
        `is not a RabbitMQ option (known: ${[...BROKER_FIELDS].join(', ')})`,
      );
    }
  }
  if (broker.type !== undefined && broker.type !== 'rabbitmq') {
    throw new ConfigError(label('type'), `must be 'rabbitmq', got ${show(broker.type)}`);
  }
  const urls = Array.isArray(broker.url) ? (broker.url as unknown[]) : [broker.url];
  if (urls.length === 0) throw new ConfigError(label('url'), 'must be a URL or a non-empty list of URLs');
  for (const url of urls) {
    if (typeof url !== 'string' || !/^amqps?:\/\//.test(url)) {
      throw new ConfigError(label('url'), `must be an amqp:// or amqps:// URL, got ${show(redact(url))}`);
    }
  }
  const url = urls[0] as string;
  const consumeArguments = broker.consumeArguments ?? {};
  if (typeof consumeArguments !== 'object' || consumeArguments === null || Array.isArray(consumeArguments)) {
    throw new ConfigError(label('consumeArguments'), 'must be an object of basic.consume arguments');
  }
  const topology = parseTopology(broker, label);
  const retry = broker.retry ?? 'topology';
  if (retry !== 'topology' && retry !== 'requeue') {
    throw new ConfigError(label('retry'), `must be 'topology' or 'requeue', got ${show(retry)}`);
  }
  const assertQueue = broker.assertQueue ?? true;
  if (typeof assertQueue !== 'boolean') {
    throw new ConfigError(label('assertQueue'), `must be true or false, got ${show(assertQueue)}`);
  }
  if (retry === 'topology' && !assertQueue && topology.retryDelaysMs === undefined) {
    throw new ConfigError(
      label('retryDelaysMs'),
      "must list the delay queues' delays when assertQueue is false and retry is 'topology' (the adapter cannot declare delay queues on demand); declare them with assertTopology({ retryDelaysMs })",
    );
  }
  const consumerTimeoutMs = broker.consumerTimeoutMs;
  if (consumerTimeoutMs !== undefined && consumerTimeoutMs !== false) {
    integer(
      consumerTimeoutMs,
      1,
      2 ** 31 - 1,
      label('consumerTimeoutMs'),
      'or false (disabled on the server)',
    );
  }
  const connectionName = broker.connectionName;
  if (connectionName !== undefined && (typeof connectionName !== 'string' || connectionName === '')) {
    throw new ConfigError(label('connectionName'), `must be a non-empty string, got ${show(connectionName)}`);
  }
  const reconnect = (broker.reconnect ?? {}) as Record<string, unknown>;
  if (typeof reconnect !== 'object' || reconnect === null) {
    throw new ConfigError(label('reconnect'), 'must be an object { initialMs?, maxMs? }');
  }
  const reconnectInitialMs =
    optionalInteger(reconnect.initialMs, 1, 3_600_000, label('reconnect.initialMs')) ?? 100;
  const reconnectMaxMs = optionalInteger(reconnect.maxMs, 1, 3_600_000, label('reconnect.maxMs')) ?? 30_000;
  if (reconnectMaxMs < reconnectInitialMs) {
    throw new ConfigError(label('reconnect.maxMs'), `must be >= reconnect.initialMs (${reconnectInitialMs})`);
  }
  const socketOptions = broker.socketOptions ?? {};
  if (typeof socketOptions !== 'object' || socketOptions === null) {
    throw new ConfigError(label('socketOptions'), 'must be an object');
  }
  return {
    ...topology,
    url,
    urls: urls as string[],
    consumerPriority: optionalInteger(
      broker.consumerPriority,
      -(2 ** 31),
      2 ** 31 - 1,
      label('consumerPriority'),
    ),
    consumeArguments: consumeArguments as Record<string, unknown>,
    prefetch: optionalInteger(broker.prefetch, 1, 65_535, label('prefetch')),
    retry,
    assertQueue,
    consumerTimeoutMs: consumerTimeoutMs as number | false | undefined,
    connectionName,
    heartbeatSeconds: optionalInteger(broker.heartbeatSeconds, 0, 65_535, label('heartbeatSeconds')),
    reconnectInitialMs,
    reconnectMaxMs,
    confirmTimeoutMs:
      optionalInteger(broker.confirmTimeoutMs, 1, 3_600_000, label('confirmTimeoutMs')) ?? 30_000,
    socketOptions: socketOptions as Record<string, unknown>,
  };
}

/**
 * Checks topology options and fills in defaults; `label` names a field in errors.
 *
 * @example
 * ```ts
 * parseTopology({ queue: 'payments', queueType: 'quorum' }).deadLetterExchange; // 'payments.dlx'
 * ```
 */
export function parseTopology(
  options: Readonly<Record<string, unknown>>,
  label: (field: string) => string = (field) => field,
): ResolvedTopology {
  const queue = options.queue;
  name(queue, label('queue'), DELAY_SUFFIX_BYTES);
  const q = queue as string;
  const queueType = options.queueType ?? 'classic';
  if (queueType !== 'classic' && queueType !== 'quorum') {
    throw new ConfigError(label('queueType'), `must be 'classic' or 'quorum', got ${show(queueType)}`);
  }
  const deadLetterExchange = options.deadLetterExchange ?? `${q}.dlx`;
  name(deadLetterExchange, label('deadLetterExchange'));
  const deadLetterQueue = options.deadLetterQueue ?? `${q}.dlq`;
  name(deadLetterQueue, label('deadLetterQueue'));
  const deadLetterRoutingKey = options.deadLetterRoutingKey ?? q;
  if (typeof deadLetterRoutingKey !== 'string' || Buffer.byteLength(deadLetterRoutingKey) > MAX_NAME_BYTES) {
    throw new ConfigError(label('deadLetterRoutingKey'), `must be a string of at most 255 bytes`);
  }
  const deliveryLimit = optionalInteger(options.deliveryLimit, 1, 2 ** 31 - 1, label('deliveryLimit'));
  if (deliveryLimit !== undefined && queueType !== 'quorum') {
    throw new ConfigError(label('deliveryLimit'), "only applies to quorum queues (queueType: 'quorum')");
  }
  let retryDelaysMs: number[] | undefined;
  if (options.retryDelaysMs !== undefined) {
    const delays = options.retryDelaysMs;
    if (!Array.isArray(delays) || delays.length === 0) {
      throw new ConfigError(label('retryDelaysMs'), 'must be a non-empty array of delays in ms');
    }
    delays.forEach((delay, i) => {
      integer(delay, 1, 2 ** 31 - 1, `${label('retryDelaysMs')}[${i}]`);
    });
    retryDelaysMs = [...new Set(delays as number[])].sort((a, b) => a - b);
  }
  const queueArguments = options.queueArguments ?? {};
  if (typeof queueArguments !== 'object' || queueArguments === null || Array.isArray(queueArguments)) {
    throw new ConfigError(label('queueArguments'), 'must be an object of x-arguments');
  }
  const singleActiveConsumer = options.singleActiveConsumer ?? false;
  if (typeof singleActiveConsumer !== 'boolean') {
    throw new ConfigError(
      label('singleActiveConsumer'),
      `must be true or false, got ${show(singleActiveConsumer)}`,
    );
  }
  const bindings = options.bindings ?? [];
  if (!Array.isArray(bindings))
    throw new ConfigError(
      label('bindings'),
      'must be an array of { exchange, type?, routingKey?, arguments? }',
    );
  bindings.forEach((binding: unknown, i) => {
    const field = `${label('bindings')}[${i}]`;
    if (typeof binding !== 'object' || binding === null)
      throw new ConfigError(field, 'must be { exchange, type?, routingKey?, arguments? }');
    const b = binding as Record<string, unknown>;
    name(b.exchange, `${field}.exchange`);
    if (b.type !== undefined && !['direct', 'topic', 'fanout', 'headers'].includes(b.type as string)) {
      throw new ConfigError(
        `${field}.type`,
        `must be 'direct', 'topic', 'fanout' or 'headers', got ${show(b.type)}`,
      );
    }
    if (
      b.routingKey !== undefined &&
      (typeof b.routingKey !== 'string' || Buffer.byteLength(b.routingKey) > MAX_NAME_BYTES)
    ) {
      throw new ConfigError(`${field}.routingKey`, 'must be a string of at most 255 bytes');
    }
    if (b.arguments !== undefined && (typeof b.arguments !== 'object' || b.arguments === null)) {
      throw new ConfigError(`${field}.arguments`, 'must be an object');
    }
  });
  return {
    queue: q,
    queueType,
    deadLetterExchange: deadLetterExchange as string,
    deadLetterQueue: deadLetterQueue as string,
    deadLetterRoutingKey,
    deliveryLimit,
    retryDelaysMs,
    queueArguments: queueArguments as Record<string, unknown>,
    singleActiveConsumer,
    bindings: bindings as RabbitMqBinding[],
  };
}

function name(value: unknown, field: string, reserve = 0): void {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new ConfigError(field, `must be a non-empty string, got ${show(value)}`);
  }
  if (Buffer.byteLength(value) > MAX_NAME_BYTES - reserve) {
    throw new ConfigError(field, `must be at most ${MAX_NAME_BYTES - reserve} bytes long`);
  }
  if (value.startsWith('amq.')) {
    throw new ConfigError(field, "must not start with 'amq.' (reserved by RabbitMQ)");
  }
}

function optionalInteger(value: unknown, min: number, max: number, field: string): number | undefined {
  if (value === undefined) return undefined;
  integer(value, min, max, field);
  return value as number;
}

function integer(value: unknown, min: number, max: number, field: string, alternative = ''): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const extra = alternative ? ` ${alternative}` : '';
    throw new ConfigError(field, `must be an integer from ${min} to ${max}${extra}, got ${show(value)}`);
  }
}

/** Hides the password of an AMQP URL in error messages. */
function redact(url: unknown): unknown {
  return typeof url === 'string' ? url.replace(/\/\/([^:/@]*):[^@]*@/, '//$1:***@') : url;
}

function show(value: unknown): string {
  if (typeof value === 'string') return `'${value}'`;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

// Adds this adapter's section to the `broker` union of ConsumerConfig (declaration merging),
// so `createConsumer({ broker: { type: 'rabbitmq', ... } })` is type-checked.
declare module '@oncely/core' {
  interface BrokerOptionsByType {
    rabbitmq: RabbitMqBrokerOptions & { type: 'rabbitmq' };
  }
}
