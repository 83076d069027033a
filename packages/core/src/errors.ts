/**
 * Every error Oncely throws is an {@link OncelyError} with a stable `code`.
 *
 * Type guards use a global symbol rather than `instanceof`, so they keep working when an
 * application ends up with two copies of `@oncely/core` (nested node_modules).
 */
const ONCELY_ERROR = Symbol.for('oncely.error');

/**
 * Stable machine-readable error codes. Never match on message text. Adapter and store
 * packages add codes of their own (any upper-case string).
 */
export type OncelyErrorCode =
  | (string & {})
  | 'CONFIG_INVALID'
  | 'ADAPTER_NOT_INSTALLED'
  | 'STORE_UNAVAILABLE'
  | 'STORE_REENTRANCY'
  | 'LEASE_LOST'
  | 'HANDLER_TIMEOUT'
  | 'MISSING_MESSAGE_ID'
  | 'INVALID_BODY'
  | 'CONSUMER_STATE'
  | 'BROKER_MISCONFIGURED'
  | 'SHUTDOWN';

/**
 * Base class of every Oncely error.
 *
 * @example
 * ```ts
 * try { await consumer.start(); } catch (e) { if (isOncelyError(e, 'CONFIG_INVALID')) console.error(e.message); }
 * ```
 */
export class OncelyError extends Error {
  readonly [ONCELY_ERROR] = true;
  constructor(
    readonly code: OncelyErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Configuration that cannot work; `field` is the dotted path of the offending field. */
export class ConfigError extends OncelyError {
  constructor(
    readonly field: string,
    /** What is wrong with the field (the message without the field). */
    readonly problem: string,
    options?: ErrorOptions,
  ) {
    super('CONFIG_INVALID', `Invalid Oncely config: ${field} ${problem}`, options);
  }
}

/** The adapter package for `broker.type` could not be loaded from the application. */
export class AdapterNotInstalledError extends OncelyError {
  constructor(
    readonly brokerType: string,
    readonly packageName: string,
    options?: ErrorOptions,
  ) {
    super(
      'ADAPTER_NOT_INSTALLED',
      `broker.type '${brokerType}' needs the package ${packageName}: run \`npm install ${packageName}\` in your application`,
      options,
    );
  }
}

/** The store (database) cannot be reached; the consumer fails closed until it answers. */
export class StoreUnavailableError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('STORE_UNAVAILABLE', message, options);
  }
}

/**
 * Store access from inside a handler that bypasses `ctx.tx` on a single-connection store
 * (PGlite): it would wait forever for the handler's own transaction, so it fails instead.
 */
export class StoreReentrancyError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('STORE_REENTRANCY', message, options);
  }
}

/** The broker lease (or the leased-mode claim) is gone: another consumer may now hold the message. */
export class LeaseLostError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('LEASE_LOST', message, options);
  }
}

/** The handler ran past `handlerTimeoutMs` (or the broker's maximum lease). */
export class HandlerTimeoutError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('HANDLER_TIMEOUT', message, options);
  }
}

/** The consumer was used in a state that does not allow the call (for example `start()` twice). */
export class ConsumerStateError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('CONSUMER_STATE', message, options);
  }
}

/** The broker side is set up in a way that breaks the guarantees (reported at start and by `diagnose()`). */
export class BrokerMisconfiguredError extends OncelyError {
  constructor(message: string, options?: ErrorOptions) {
    super('BROKER_MISCONFIGURED', message, options);
  }
}

/**
 * True when `error` is an Oncely error (optionally with the given code), even across
 * duplicate copies of this package.
 */
export function isOncelyError(error: unknown, code?: OncelyErrorCode): error is OncelyError {
  if (typeof error !== 'object' || error === null || !(ONCELY_ERROR in error)) return false;
  return code === undefined || (error as OncelyError).code === code;
}
