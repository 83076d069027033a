import type { Logger } from './types.js';

/**
 * The default logger: warnings and errors as one JSON line each on stderr, nothing else.
 * Pass your own `logger` (pino, winston...) to see debug and info lines.
 */
export const stderrLogger: Logger = {
  debug() {},
  info() {},
  warn: (message, fields) => write('warn', message, fields),
  error: (message, fields) => write('error', message, fields),
};

/** A logger that drops everything. */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * Marks a pino logger (and its children): pino defines it with `Symbol.for`, so every
 * copy and version of pino sets the same one.
 */
const PINO_SERIALIZERS = Symbol.for('pino.serializers');

/**
 * The logger Oncely calls, from the one you pass. Oncely calls `log.warn(message,
 * fields)`; a pino logger takes `(fields, message)` and would drop the fields, so a pino
 * instance (recognised by pino's own `Symbol.for('pino.serializers')`) is called fields
 * first, with `error` passed as pino's `err` so its error serializer keeps the message
 * and stack. Any other logger is used as it is. The consumer, `PostgresStore` and the
 * HTTP and Lambda helpers apply it to their `logger` option.
 *
 * @example
 * ```ts
 * import pino from 'pino';
 * const consumer = await createConsumer({ ...config, logger: pino() }); // toLogger is applied for you
 * toLogger(pino()).warn('lease renewal failed', { messageId: 'm-1', error }); // {"msg":"lease renewal failed","messageId":"m-1","err":{...}}
 * ```
 */
export function toLogger(logger: Logger): Logger {
  if (typeof logger !== 'object' || logger === null || !(PINO_SERIALIZERS in logger)) return logger;
  const call =
    (level: keyof Logger) =>
    (message: string, fields?: Record<string, unknown>): void => {
      if (fields === undefined) logger[level](message);
      else
        (logger[level] as unknown as (fields: object, message: string) => void)(pinoFields(fields), message);
    };
  return { debug: call('debug'), info: call('info'), warn: call('warn'), error: call('error') };
}

function pinoFields(fields: Record<string, unknown>): Record<string, unknown> {
  if (!(fields.error instanceof Error) || 'err' in fields) return fields;
  const { error, ...rest } = fields;
  return { ...rest, err: error };
}

function write(level: string, message: string, fields?: Record<string, unknown>): void {
  const extra = fields ? Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, serialize(v)])) : {};
  process.stderr.write(`${JSON.stringify({ level, msg: message, ...extra })}\n`);
}

function serialize(value: unknown): unknown {
  return value instanceof Error
    ? { name: value.name, message: value.message, code: (value as any).code }
    : value;
}
