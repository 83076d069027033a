import { readFileSync } from 'node:fs';
import {
  ADAPTER_PACKAGES,
  BODY_FORMATS,
  CONSUMER_DEFAULTS,
  checkIdStrategy,
  didYouMean,
  ID_STRATEGIES,
  MODES,
  oneOf,
  validateSerializable,
} from './config.js';
import { ConfigError } from './errors.js';
import { MISMATCH_POLICIES } from './fingerprint.js';
import { STORE_PACKAGES, type StoreConfig } from './storeConfig.js';
import type { ConsumerConfig } from './types.js';

// loadConfig: a consumer config from a JSON file and `ONCELY_*` variables, checked by the
// same validation as a config from code (config.ts), every error naming where its value
// came from.

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
  ONCELY_OPERATOR: {
    field: 'who `oncely dlq discard` records as the discarder (default: the OS user)',
    type: 'string',
  },
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
  let fileFields: Record<string, unknown> = {};
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
    fileFields = { ...config };
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
  // A field the environment did not set came from the file (the file's own fields, and
  // any misspelt one, are labelled with its path).
  const label = (field: string) =>
    sources.has(field)
      ? `${field} (from ${sources.get(field)})`
      : file && field.split('.')[0]! in fileFields
        ? `${field} (from ${file})`
        : field;
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
    throw new ConfigError(
      variable,
      `is not an Oncely variable${didYouMean(variable, known, `, ${BROKER_PREFIX}<OPTION>`)}`,
    );
  }
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
