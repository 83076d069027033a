import { ConfigError } from './errors.js';
import { validateFingerprintOptions } from './fingerprint.js';
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

export const MODES = ['transactional', 'leased', 'offsets'] as const;
export const BODY_FORMATS = ['json', 'text', 'buffer'] as const;
export const ID_STRATEGIES = ['producer', 'broker', 'deduplication-id', 'content-hash'] as const;
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
export function validateSerializable(
  config: Record<string, unknown>,
  label: (field: string) => string,
): void {
  checkFieldNames(config, KNOWN_FIELDS, 'consumer', '', label);
  for (const [section, known] of Object.entries(NESTED_FIELDS)) {
    const value = config[section];
    if (typeof value === 'object' && value !== null)
      checkFieldNames(value as Record<string, unknown>, known, section, `${section}.`, label);
  }
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

/** The fields of the nested sections, checked by name like the top level. */
const NESTED_FIELDS: Record<string, ReadonlySet<string>> = {
  backoff: new Set(['initialMs', 'maxMs', 'multiplier', 'jitter']),
  batch: new Set(['size', 'maxWaitMs']),
};

/**
 * Throws on a field that is not an option, naming the nearest one: one check for a config
 * from code, a file or the environment (a misspelt field would otherwise run at its default).
 */
function checkFieldNames(
  section: Record<string, unknown>,
  known: ReadonlySet<string>,
  kind: string,
  prefix: string,
  label: (field: string) => string,
): void {
  for (const field of Object.keys(section)) {
    if (known.has(field)) continue;
    throw new ConfigError(
      label(`${prefix}${field}`),
      `is not a ${kind} option${didYouMean(field, [...known])}`,
    );
  }
}

/** `; did you mean X?` for a name close to a known one, else the list of known names. */
export function didYouMean(name: string, known: string[], extra = ''): string {
  const nearest = known
    .map((candidate) => ({ candidate, distance: editDistance(name.toLowerCase(), candidate.toLowerCase()) }))
    .sort((a, b) => a.distance - b.distance)[0];
  return nearest !== undefined && nearest.distance <= Math.max(2, Math.floor(name.length / 5))
    ? `; did you mean ${nearest.candidate}?`
    : ` (known: ${known.join(', ')}${extra})`;
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

export function checkIdStrategy(strategy: unknown, field: string): void {
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

export function oneOf(value: unknown, allowed: readonly string[], field: string): void {
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

/** Levenshtein distance, for the did-you-mean of an unknown name. */
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
