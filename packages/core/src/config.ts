import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.js';
import type { BrokerConfig, BrokerType, ConsumerConfig } from './types.js';

/** Broker types `createConsumer` knows, and the package that implements each. */
export const ADAPTER_PACKAGES: Readonly<Record<BrokerType, string>> = {
  memory: '@oncely/memory',
  sqs: '@oncely/sqs',
  servicebus: '@oncely/servicebus',
  pubsub: '@oncely/pubsub',
  rabbitmq: '@oncely/rabbitmq',
  kafka: '@oncely/kafka',
};

/** Defaults of the optional consumer settings (the `@default` of each field). */
export const CONSUMER_DEFAULTS = {
  concurrency: 1,
  mode: 'transactional',
  bodyFormat: 'json',
  maxAttempts: 5,
  handlerTimeoutMs: 30_000,
  leaseRenewal: true,
  leaseMs: 30_000,
  outageHoldMs: 60_000,
  stopTimeoutMs: 30_000,
} as const;

/** Default of `batch.maxWaitMs`: how long a partial batch waits for more messages. */
export const DEFAULT_BATCH_MAX_WAIT_MS = 20;

const MODES = ['transactional', 'leased', 'offsets'] as const;
const BODY_FORMATS = ['json', 'text', 'buffer'] as const;
const ID_STRATEGIES = ['producer', 'broker', 'deduplication-id', 'content-hash'] as const;
const KNOWN_FIELDS = new Set([
  'name',
  'broker',
  'store',
  'handler',
  'concurrency',
  'mode',
  'idStrategy',
  'bodyFormat',
  'maxAttempts',
  'backoff',
  'handlerTimeoutMs',
  'leaseRenewal',
  'leaseMs',
  'outageHoldMs',
  'stopTimeoutMs',
  'batch',
  'logger',
  'telemetry',
]);

/**
 * Checks a consumer config and throws a {@link ConfigError} naming the first offending
 * field. `createConsumer` calls it; call it yourself to fail fast at boot.
 *
 * @example
 * ```ts
 * validateConsumerConfig({ name: 'payments', broker: { type: 'sqs', queueUrl }, store, handler, concurrency: 0 });
 * // ConfigError: Invalid Oncely config: concurrency must be an integer from 1 to 10000, got 0
 * ```
 */
export function validateConsumerConfig(config: ConsumerConfig<any, any>): void {
  if (typeof config !== 'object' || config === null) throw new ConfigError('config', 'must be an object');
  for (const field of Object.keys(config)) {
    if (!KNOWN_FIELDS.has(field))
      throw new ConfigError(field, `is not a consumer option (known: ${[...KNOWN_FIELDS].join(', ')})`);
  }
  validateSerializable(config as unknown as Record<string, unknown>, (field) => field);
  const store = config.store as unknown as Record<string, unknown> | undefined;
  if (
    typeof store !== 'object' ||
    store === null ||
    typeof store.transaction !== 'function' ||
    typeof store.claim !== 'function'
  ) {
    throw new ConfigError(
      'store',
      'must be an idempotency store such as new PostgresStore(...) or PostgresStore.embedded()',
    );
  }
  if (typeof config.handler !== 'function')
    throw new ConfigError('handler', 'must be an async function (message, ctx) => ...');
  const { idStrategy, bodyFormat, logger } = config;
  if (idStrategy !== undefined && typeof idStrategy !== 'function') checkIdStrategy(idStrategy, 'idStrategy');
  if (bodyFormat !== undefined && typeof bodyFormat !== 'function')
    oneOf(bodyFormat, BODY_FORMATS, 'bodyFormat');
  if (logger !== undefined) {
    for (const level of ['debug', 'info', 'warn', 'error'] as const) {
      if (typeof (logger as any)?.[level] !== 'function')
        throw new ConfigError(`logger.${level}`, 'must be a function');
    }
  }
  checkTelemetry(config.telemetry);
}

/** `telemetry`: each provider, when given, has the one method Oncely calls on it. */
function checkTelemetry(telemetry: unknown): void {
  if (telemetry === undefined) return;
  if (typeof telemetry !== 'object' || telemetry === null)
    throw new ConfigError('telemetry', 'must be an object { tracerProvider?, meterProvider?, propagator? }');
  const methods = { tracerProvider: 'getTracer', meterProvider: 'getMeter', propagator: 'extract' } as const;
  for (const field of Object.keys(telemetry)) {
    if (!(field in methods))
      throw new ConfigError(
        `telemetry.${field}`,
        'is not a telemetry option (known: tracerProvider, meterProvider, propagator)',
      );
  }
  for (const [field, method] of Object.entries(methods)) {
    const value = (telemetry as Record<string, any>)[field];
    if (value !== undefined && typeof value?.[method] !== 'function')
      throw new ConfigError(
        `telemetry.${field}`,
        `must be an OpenTelemetry ${field} (no ${method}() method)`,
      );
  }
}

/** Checks the fields that can come from a file or the environment. `label` names a field for errors. */
function validateSerializable(config: Record<string, unknown>, label: (field: string) => string): void {
  const name = config.name;
  if (typeof name !== 'string' || name.trim() === '' || name.length > 200) {
    throw new ConfigError(
      label('name'),
      `must be a non-empty string of at most 200 characters, got ${show(name)}`,
    );
  }
  validateBroker(config.broker, label);
  integer(config.concurrency, 1, 10_000, label('concurrency'));
  integer(config.maxAttempts, 1, 1000, label('maxAttempts'));
  integer(config.handlerTimeoutMs, 1, 24 * 3600_000, label('handlerTimeoutMs'));
  integer(config.leaseMs, 100, 24 * 3600_000, label('leaseMs'));
  integer(config.outageHoldMs, 0, 24 * 3600_000, label('outageHoldMs'));
  integer(config.stopTimeoutMs, 0, 24 * 3600_000, label('stopTimeoutMs'));
  if (config.mode !== undefined) oneOf(config.mode, MODES, label('mode'));
  const batch = config.batch as Record<string, unknown> | undefined;
  if (batch !== undefined) {
    if (typeof batch !== 'object' || batch === null)
      throw new ConfigError(label('batch'), 'must be an object');
    integer(batch.size, 1, 1000, label('batch.size'));
    if (batch.size === undefined) throw new ConfigError(label('batch.size'), 'is required with batch');
    integer(batch.maxWaitMs, 0, 60_000, label('batch.maxWaitMs'));
    const concurrency = (config.concurrency as number | undefined) ?? CONSUMER_DEFAULTS.concurrency;
    if ((batch.size as number) > concurrency) {
      throw new ConfigError(
        label('batch.size'),
        `must be <= concurrency (${concurrency}): a batch fills only with messages in flight at once; got ${batch.size}`,
      );
    }
    if (config.mode !== undefined && config.mode !== 'transactional') {
      throw new ConfigError(label('batch'), `works in 'transactional' mode only, not '${config.mode}'`);
    }
  }
  if (config.leaseRenewal !== undefined && typeof config.leaseRenewal !== 'boolean') {
    throw new ConfigError(label('leaseRenewal'), `must be true or false, got ${show(config.leaseRenewal)}`);
  }
  const backoff = config.backoff as Record<string, unknown> | undefined;
  if (backoff !== undefined) {
    if (typeof backoff !== 'object' || backoff === null)
      throw new ConfigError(label('backoff'), 'must be an object');
    integer(backoff.initialMs, 0, 24 * 3600_000, label('backoff.initialMs'));
    integer(backoff.maxMs, 0, 24 * 3600_000, label('backoff.maxMs'));
    if (
      typeof backoff.initialMs === 'number' &&
      typeof backoff.maxMs === 'number' &&
      backoff.maxMs < backoff.initialMs
    ) {
      throw new ConfigError(
        label('backoff.maxMs'),
        `must be >= backoff.initialMs (${backoff.initialMs}), got ${backoff.maxMs}`,
      );
    }
    if (
      backoff.multiplier !== undefined &&
      !(typeof backoff.multiplier === 'number' && backoff.multiplier >= 1)
    ) {
      throw new ConfigError(
        label('backoff.multiplier'),
        `must be a number >= 1, got ${show(backoff.multiplier)}`,
      );
    }
    if (
      backoff.jitter !== undefined &&
      !(typeof backoff.jitter === 'number' && backoff.jitter >= 0 && backoff.jitter <= 1)
    ) {
      throw new ConfigError(
        label('backoff.jitter'),
        `must be a number from 0 to 1, got ${show(backoff.jitter)}`,
      );
    }
  }
}

function validateBroker(broker: unknown, label: (field: string) => string): asserts broker is BrokerConfig {
  if (typeof broker !== 'object' || broker === null) {
    throw new ConfigError(label('broker'), `must be an object with a 'type', got ${show(broker)}`);
  }
  const type = (broker as Record<string, unknown>).type;
  if (typeof type !== 'string' || !(type in ADAPTER_PACKAGES)) {
    throw new ConfigError(
      label('broker.type'),
      `must be one of ${Object.keys(ADAPTER_PACKAGES).join(', ')}; got ${show(type)}`,
    );
  }
}

function checkIdStrategy(strategy: unknown, field: string): void {
  if (typeof strategy === 'string') {
    oneOf(strategy, ID_STRATEGIES, field);
    return;
  }
  const attribute = (strategy as { attribute?: unknown } | null)?.attribute;
  if (typeof strategy !== 'object' || typeof attribute !== 'string' || attribute === '') {
    throw new ConfigError(
      field,
      `must be { attribute: 'name' }, one of ${ID_STRATEGIES.join(', ')}, or a function`,
    );
  }
}

function integer(value: unknown, min: number, max: number, field: string): void {
  if (value === undefined) return;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${show(value)}`);
  }
}

function oneOf(value: unknown, allowed: readonly string[], field: string): void {
  if (typeof value !== 'string' || !allowed.includes(value)) {
    throw new ConfigError(field, `must be one of ${allowed.join(', ')}; got ${show(value)}`);
  }
}

function show(value: unknown): string {
  return value === undefined ? 'nothing' : (JSON.stringify(value) ?? String(value));
}

// ---------------------------------------------------------------------------------------
// loadConfig
// ---------------------------------------------------------------------------------------

/** The part of a consumer config that can live in a file or the environment. */
export type LoadedConfig = Omit<ConsumerConfig, 'store' | 'handler' | 'logger'>;

export interface LoadConfigOptions {
  /** @default process.env */
  env?: Record<string, string | undefined>;
  /** JSON file to start from. @default env.ONCELY_CONFIG_FILE */
  file?: string;
}

const ENV_FIELDS: Record<string, { field: string; kind: 'string' | 'number' | 'boolean' }> = {
  ONCELY_NAME: { field: 'name', kind: 'string' },
  ONCELY_CONCURRENCY: { field: 'concurrency', kind: 'number' },
  ONCELY_MODE: { field: 'mode', kind: 'string' },
  ONCELY_MAX_ATTEMPTS: { field: 'maxAttempts', kind: 'number' },
  ONCELY_HANDLER_TIMEOUT_MS: { field: 'handlerTimeoutMs', kind: 'number' },
  ONCELY_LEASE_MS: { field: 'leaseMs', kind: 'number' },
  ONCELY_OUTAGE_HOLD_MS: { field: 'outageHoldMs', kind: 'number' },
  ONCELY_STOP_TIMEOUT_MS: { field: 'stopTimeoutMs', kind: 'number' },
  ONCELY_BODY_FORMAT: { field: 'bodyFormat', kind: 'string' },
  ONCELY_BACKOFF_INITIAL_MS: { field: 'backoff.initialMs', kind: 'number' },
  ONCELY_BACKOFF_MAX_MS: { field: 'backoff.maxMs', kind: 'number' },
};

/**
 * Builds the serializable part of a consumer config from a JSON file and environment
 * variables (environment wins), validated; errors name the field and where it came from.
 * Swapping brokers is then a configuration change:
 *
 * - `ONCELY_CONFIG_FILE`: a JSON file with any of the fields below;
 * - `ONCELY_NAME`, `ONCELY_CONCURRENCY`, `ONCELY_MODE`, `ONCELY_MAX_ATTEMPTS`,
 *   `ONCELY_HANDLER_TIMEOUT_MS`, `ONCELY_LEASE_MS`, `ONCELY_OUTAGE_HOLD_MS`,
 *   `ONCELY_STOP_TIMEOUT_MS`, `ONCELY_BODY_FORMAT`, `ONCELY_BACKOFF_INITIAL_MS`,
 *   `ONCELY_BACKOFF_MAX_MS`;
 * - `ONCELY_ID_ATTRIBUTE` (→ `idStrategy: { attribute }`) or `ONCELY_ID_STRATEGY`
 *   (`producer | broker | deduplication-id | content-hash`);
 * - `ONCELY_BROKER_TYPE` and `ONCELY_BROKER_<OPTION>` for broker options, the option name
 *   in SCREAMING_SNAKE_CASE (`ONCELY_BROKER_QUEUE_URL` → `broker.queueUrl`).
 *
 * @example
 * ```ts
 * const consumer = await createConsumer({ ...loadConfig(), store, handler });
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const env = options.env ?? process.env;
  const file = options.file ?? env.ONCELY_CONFIG_FILE;
  const sources = new Map<string, string>();
  let config: Record<string, any> = {};
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new ConfigError('ONCELY_CONFIG_FILE', `cannot be read (${file})`, { cause: error });
    }
    try {
      config = JSON.parse(text);
    } catch (error) {
      throw new ConfigError(
        'ONCELY_CONFIG_FILE',
        `is not valid JSON (${file}): ${(error as Error).message}`,
        { cause: error },
      );
    }
    if (typeof config !== 'object' || config === null || Array.isArray(config)) {
      throw new ConfigError('ONCELY_CONFIG_FILE', `must hold a JSON object (${file})`);
    }
    for (const field of ['store', 'handler', 'logger', 'telemetry']) {
      if (field in config) throw new ConfigError(field, `cannot come from a file (${file}); pass it in code`);
    }
  }
  for (const [variable, { field, kind }] of Object.entries(ENV_FIELDS)) {
    const raw = env[variable];
    if (raw === undefined || raw === '') continue;
    setPath(config, field, parseValue(raw, kind, variable));
    sources.set(field, variable);
  }
  if (env.ONCELY_ID_ATTRIBUTE) {
    config.idStrategy = { attribute: env.ONCELY_ID_ATTRIBUTE };
    sources.set('idStrategy', 'ONCELY_ID_ATTRIBUTE');
  } else if (env.ONCELY_ID_STRATEGY) {
    config.idStrategy = env.ONCELY_ID_STRATEGY;
    sources.set('idStrategy', 'ONCELY_ID_STRATEGY');
  }
  if (env.ONCELY_BROKER_TYPE) {
    if (config.broker?.type !== undefined && config.broker.type !== env.ONCELY_BROKER_TYPE) {
      config.broker = {}; // a different broker: options from the file belong to the other one
    }
    config.broker = { ...config.broker, type: env.ONCELY_BROKER_TYPE };
    sources.set('broker.type', 'ONCELY_BROKER_TYPE');
  }
  for (const [variable, raw] of Object.entries(env)) {
    if (!variable.startsWith('ONCELY_BROKER_') || variable === 'ONCELY_BROKER_TYPE' || raw === undefined)
      continue;
    const option = camelCase(variable.slice('ONCELY_BROKER_'.length));
    config.broker = { ...config.broker, [option]: parseLoose(raw) };
  }
  const label = (field: string) => (sources.has(field) ? `${field} (from ${sources.get(field)})` : field);
  validateSerializable(config, label);
  if (config.idStrategy !== undefined) checkIdStrategy(config.idStrategy, label('idStrategy'));
  if (config.bodyFormat !== undefined) oneOf(config.bodyFormat, BODY_FORMATS, label('bodyFormat'));
  return config as LoadedConfig;
}

function parseValue(raw: string, kind: 'string' | 'number' | 'boolean', variable: string): unknown {
  if (kind === 'string') return raw;
  if (kind === 'boolean') {
    if (raw === 'true' || raw === 'false') return raw === 'true';
    throw new ConfigError(variable, `must be true or false, got ${JSON.stringify(raw)}`);
  }
  const value = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(value))
    throw new ConfigError(variable, `must be a number, got ${JSON.stringify(raw)}`);
  return value;
}

/** Broker options: numbers and booleans where the text is one, strings otherwise. */
function parseLoose(raw: string): unknown {
  if (raw === 'true' || raw === 'false') return raw === 'true';
  if (/^-?\d+(\.\d+)?$/.test(raw)) return Number(raw);
  return raw;
}

function camelCase(screaming: string): string {
  return screaming.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function setPath(target: Record<string, any>, path: string, value: unknown): void {
  const parts = path.split('.');
  let node = target;
  for (const part of parts.slice(0, -1)) node = node[part] ??= {};
  node[parts.at(-1)!] = value;
}
