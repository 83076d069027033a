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

function write(level: string, message: string, fields?: Record<string, unknown>): void {
  const extra = fields ? Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, serialize(v)])) : {};
  process.stderr.write(`${JSON.stringify({ level, msg: message, ...extra })}\n`);
}

function serialize(value: unknown): unknown {
  return value instanceof Error
    ? { name: value.name, message: value.message, code: (value as any).code }
    : value;
}
