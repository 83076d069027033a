import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.js';
import { MISMATCH_POLICIES, validateFingerprintOptions } from './fingerprint.js';
import { STORE_PACKAGES, type StoreConfig } from './storeConfig.js';
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
  stopGraceMs: 5_000,
  onPayloadMismatch: 'skip',
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
  'batchHandler',
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
  'stopGraceMs',
  'batch',
  'payloadFingerprint',
  'onPayloadMismatch',
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
  checkHandlers(config);
  const { idStrategy, bodyFormat, logger } = config;
  validateFingerprintOptions(config.payloadFingerprint, config.onPayloadMismatch);
  if (config.payloadFingerprint && config.mode === 'offsets') {
    throw new ConfigError('payloadFingerprint', "needs processed markers: not available in 'offsets' mode");
  }
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
/** Exactly one of `handler` and `batchHandler`; the batch one only where batches exist. */
function checkHandlers(config: ConsumerConfig<any, any>): void {
  const { handler, batchHandler } = config;
  if (handler !== undefined && batchHandler !== undefined) {
    throw new ConfigError('batchHandler', 'cannot be given with handler: give one of them');
  }
  if (batchHandler === undefined) {
    if (typeof handler !== 'function')
      throw new ConfigError(
        'handler',
        'must be an async function (message, ctx) => ... (or give batchHandler)',
      );
    return;
  }
  if (typeof batchHandler !== 'function')
    throw new ConfigError('batchHandler', 'must be an async function (entries, tx) => ...');
  if (config.batch === undefined)
    throw new ConfigError('batchHandler', 'needs batch: { size }: it is called with the messages of a batch');
}

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
  integer(config.stopGraceMs, 0, 24 * 3600_000, label('stopGraceMs'));
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
export type LoadedConfig = Omit<ConsumerConfig, 'store' | 'handler' | 'batchHandler' | 'logger'> & {
  /** From `ONCELY_STORE_URL`: `createConsumer` builds the store from it (see {@link StoreConfig}). */
  store?: StoreConfig;
};

/**
 * Where {@link loadConfig} reads from.
 *
 * @example
 * ```ts
 * loadConfig({ env: { ONCELY_NAME: 'payments', ONCELY_BROKER_TYPE: 'memory' }, file: './oncely.json' });
 * ```
 */
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
  ONCELY_STOP_GRACE_MS: { field: 'stopGraceMs', kind: 'number' },
  ONCELY_BODY_FORMAT: { field: 'bodyFormat', kind: 'string' },
  ONCELY_BACKOFF_INITIAL_MS: { field: 'backoff.initialMs', kind: 'number' },
  ONCELY_BACKOFF_MAX_MS: { field: 'backoff.maxMs', kind: 'number' },
  ONCELY_PAYLOAD_FINGERPRINT: { field: 'payloadFingerprint', kind: 'boolean' },
  ONCELY_ON_PAYLOAD_MISMATCH: { field: 'onPayloadMismatch', kind: 'string' },
};

/**
 * `ONCELY_*` variables read elsewhere than {@link ENV_FIELDS}, with what each sets. With
 * ENV_FIELDS, the complete list `loadConfig` accepts; any other `ONCELY_*` variable is an
 * error (a misspelled variable would otherwise be ignored and its field run at the default).
 */
const OTHER_VARIABLES: Record<string, { field: string; type: string }> = {
  ONCELY_CONFIG_FILE: { field: '(a JSON file with any of the fields)', type: 'path' },
  ONCELY_ID_ATTRIBUTE: { field: 'idStrategy: { attribute }', type: 'string' },
  ONCELY_ID_STRATEGY: { field: 'idStrategy', type: ID_STRATEGIES.join(' | ') },
  ONCELY_BROKER_TYPE: { field: 'broker.type', type: Object.keys(ADAPTER_PACKAGES).join(' | ') },
  ONCELY_STORE_URL: {
    field: 'store: { url } (createConsumer loads @oncely/postgres or @oncely/mysql by the scheme)',
    type: 'postgres:// | mysql:// URL',
  },
  ONCELY_SCHEMA: { field: "the store's schema (and the CLI's --schema)", type: 'identifier' },
  ONCELY_PRUNE_MIN_AGE: { field: 'the youngest age `oncely prune` takes without --force', type: 'duration' },
};

/** Prefix of the broker options (`ONCELY_BROKER_QUEUE_URL` → `broker.queueUrl`). */
const BROKER_PREFIX = 'ONCELY_BROKER_';

/**
 * Every `ONCELY_*` variable `loadConfig` reads, with the field it sets, its type and its
 * default: the source of the table in `docs/configuration.md` (a test keeps the two equal).
 * `ONCELY_BROKER_<OPTION>` stands for the broker options.
 *
 * @example
 * ```ts
 * for (const v of describeEnvironmentVariables()) console.log(v.variable, v.field, v.default);
 * // ONCELY_CONCURRENCY concurrency 1 ...
 * ```
 */
export function describeEnvironmentVariables(): Array<{
  variable: string;
  field: string;
  type: string;
  default: string;
}> {
  const defaults: Record<string, unknown> = {
    ...CONSUMER_DEFAULTS,
    'backoff.initialMs': 1000,
    'backoff.maxMs': 60_000,
    payloadFingerprint: false,
  };
  const rows = Object.entries(ENV_FIELDS).map(([variable, { field, kind }]) => ({
    variable,
    field,
    type:
      field === 'mode'
        ? MODES.join(' | ')
        : field === 'bodyFormat'
          ? BODY_FORMATS.join(' | ')
          : field === 'onPayloadMismatch'
            ? MISMATCH_POLICIES.join(' | ')
            : kind === 'number'
              ? 'integer'
              : kind,
    default: field === 'name' ? '(required)' : defaults[field] === undefined ? '' : String(defaults[field]),
  }));
  for (const [variable, { field, type }] of Object.entries(OTHER_VARIABLES)) {
    rows.push({
      variable,
      field,
      type,
      default:
        variable === 'ONCELY_SCHEMA'
          ? 'oncely'
          : variable === 'ONCELY_PRUNE_MIN_AGE'
            ? '1h'
            : variable === 'ONCELY_BROKER_TYPE'
              ? '(required)'
              : variable === 'ONCELY_ID_STRATEGY' || variable === 'ONCELY_ID_ATTRIBUTE'
                ? "the adapter's"
                : '',
    });
  }
  rows.push({
    variable: `${BROKER_PREFIX}<OPTION>`,
    field: 'broker.<option> (SCREAMING_SNAKE_CASE → camelCase)',
    type: 'true/false → boolean, decimal → number, else string',
    default: "the adapter's",
  });
  return rows;
}

/** Source labels of broker options, kept on the loaded `broker` object (non-enumerable). */
const BROKER_SOURCES = Symbol.for('oncely.config.brokerSources');

/**
 * Where each option of a loaded `broker` section came from (`broker.queueUrl` →
 * `ONCELY_BROKER_QUEUE_URL`), so an adapter's `ConfigError` can name the variable.
 *
 * @example
 * ```ts
 * const { broker } = loadConfig({ env: { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'sqs', ONCELY_BROKER_QUEUE_URL: url } });
 * brokerOptionSource(broker, 'broker.queueUrl'); // 'ONCELY_BROKER_QUEUE_URL'
 * ```
 */
export function brokerOptionSource(broker: unknown, field: string): string | undefined {
  if (typeof broker !== 'object' || broker === null) return undefined;
  return (broker as { [BROKER_SOURCES]?: Map<string, string> })[BROKER_SOURCES]?.get(field);
}

/**
 * Returns an adapter's `ConfigError` about a loaded `broker` option with the variable or
 * file it came from in its field; any other error unchanged. `createConsumer` applies it.
 *
 * @example
 * ```ts
 * try { createAdapter(config.broker, options); } catch (error) { throw labelBrokerError(error, config.broker); }
 * // Invalid Oncely config: broker.queu (from ONCELY_BROKER_QUEU) is not a rabbitmq broker option
 * ```
 */
export function labelBrokerError(error: unknown, broker: unknown): unknown {
  if (!(error instanceof ConfigError)) return error;
  const source = brokerOptionSource(broker, error.field);
  if (source === undefined) return error;
  return new ConfigError(`${error.field} (from ${source})`, error.problem, { cause: error });
}

/**
 * Builds the serializable part of a consumer config from a JSON file and environment
 * variables (environment wins), validated; errors name the field and where it came from.
 * Swapping brokers is then a configuration change:
 *
 * - `ONCELY_CONFIG_FILE`: a JSON file with any of the fields below;
 * - `ONCELY_NAME`, `ONCELY_CONCURRENCY`, `ONCELY_MODE`, `ONCELY_MAX_ATTEMPTS`,
 *   `ONCELY_HANDLER_TIMEOUT_MS`, `ONCELY_LEASE_MS`, `ONCELY_OUTAGE_HOLD_MS`,
 *   `ONCELY_STOP_TIMEOUT_MS`, `ONCELY_BODY_FORMAT`, `ONCELY_BACKOFF_INITIAL_MS`,
 *   `ONCELY_BACKOFF_MAX_MS`, `ONCELY_PAYLOAD_FINGERPRINT` (`true`/`false`; attribute
 *   lists and functions only in code or the file), `ONCELY_ON_PAYLOAD_MISMATCH`;
 * - `ONCELY_ID_ATTRIBUTE` (→ `idStrategy: { attribute }`) or `ONCELY_ID_STRATEGY`
 *   (`producer | broker | deduplication-id | content-hash`);
 * - `ONCELY_BROKER_TYPE` and `ONCELY_BROKER_<OPTION>` for broker options, the option name
 *   in SCREAMING_SNAKE_CASE (`ONCELY_BROKER_QUEUE_URL` → `broker.queueUrl`);
 * - `ONCELY_SCHEMA` (`PostgresStore` reads it) and `ONCELY_PRUNE_MIN_AGE` (`oncely prune`)
 *   are accepted here.
 *
 * Any other `ONCELY_*` variable is an error naming it, with the nearest known name. The
 * broker options are checked by the adapter when the consumer is created; its errors
 * then name the variable (or file) each option came from.
 *
 * @example
 * ```ts
 * const consumer = await createConsumer({ ...loadConfig(), store, handler });
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const env = options.env ?? process.env;
  checkVariableNames(env);
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
    for (const field of ['store', 'handler', 'batchHandler', 'logger', 'telemetry']) {
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
  if (env.ONCELY_STORE_URL) {
    config.store = { url: checkStoreUrl(env.ONCELY_STORE_URL, 'ONCELY_STORE_URL') };
    sources.set('store', 'ONCELY_STORE_URL');
  }
  if (env.ONCELY_BROKER_TYPE) {
    if (config.broker?.type !== undefined && config.broker.type !== env.ONCELY_BROKER_TYPE) {
      config.broker = {}; // a different broker: options from the file belong to the other one
    }
    config.broker = { ...config.broker, type: env.ONCELY_BROKER_TYPE };
    sources.set('broker.type', 'ONCELY_BROKER_TYPE');
  }
  const brokerSources = new Map<string, string>();
  if (file && typeof config.broker === 'object' && config.broker !== null) {
    for (const option of Object.keys(config.broker)) brokerSources.set(`broker.${option}`, file);
  }
  for (const [variable, raw] of Object.entries(env)) {
    if (!variable.startsWith(BROKER_PREFIX) || variable === 'ONCELY_BROKER_TYPE' || raw === undefined)
      continue;
    const option = camelCase(variable.slice(BROKER_PREFIX.length));
    config.broker = { ...config.broker, [option]: parseLoose(raw) };
    brokerSources.set(`broker.${option}`, variable);
  }
  if (typeof config.broker === 'object' && config.broker !== null) {
    Object.defineProperty(config.broker, BROKER_SOURCES, { value: brokerSources, enumerable: false });
  }
  const label = (field: string) => (sources.has(field) ? `${field} (from ${sources.get(field)})` : field);
  validateSerializable(config, label);
  if (config.idStrategy !== undefined) checkIdStrategy(config.idStrategy, label('idStrategy'));
  if (config.bodyFormat !== undefined) oneOf(config.bodyFormat, BODY_FORMATS, label('bodyFormat'));
  if (config.onPayloadMismatch !== undefined)
    oneOf(config.onPayloadMismatch, MISMATCH_POLICIES, label('onPayloadMismatch'));
  return config as LoadedConfig;
}

/** Throws on an `ONCELY_*` variable `loadConfig` does not read, naming the nearest known one. */
function checkVariableNames(env: Record<string, string | undefined>): void {
  const known = [...Object.keys(ENV_FIELDS), ...Object.keys(OTHER_VARIABLES)];
  for (const [variable, value] of Object.entries(env)) {
    if (!variable.startsWith('ONCELY_') || value === undefined || known.includes(variable)) continue;
    if (variable.startsWith(BROKER_PREFIX) && variable.length > BROKER_PREFIX.length) continue;
    const nearest = known
      .map((name) => ({ name, distance: editDistance(variable, name) }))
      .sort((a, b) => a.distance - b.distance)[0]!;
    const hint =
      nearest.distance <= Math.max(2, Math.floor(variable.length / 5))
        ? `; did you mean ${nearest.name}?`
        : ` (known: ${known.join(', ')}, ${BROKER_PREFIX}<OPTION>)`;
    throw new ConfigError(variable, `is not an Oncely variable${hint}`);
  }
}

/** Levenshtein distance, for the did-you-mean of an unknown variable. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        previous[j]! + 1,
        current[j - 1]! + 1,
        previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = current;
  }
  return previous[b.length]!;
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

/** A store URL whose scheme names a store package; the URL itself is redacted from errors. */
function checkStoreUrl(url: string, field: string): string {
  let scheme: string;
  try {
    scheme = new URL(url).protocol.slice(0, -1);
  } catch {
    throw new ConfigError(
      field,
      'must be a URL such as postgres://user@host:5432/db or mysql://user@host:3306/db',
    );
  }
  if (!(scheme in STORE_PACKAGES)) {
    throw new ConfigError(
      field,
      `has the scheme ${scheme}://; known: ${Object.keys(STORE_PACKAGES).join(', ')}`,
    );
  }
  return url;
}
