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
  | 'BROKER_UNREACHABLE'
  | 'SHUTDOWN'
  | 'DEAD_LETTER_CLOSE';

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

const BROKER_NAMES: Record<string, string> = {
  rabbitmq: 'RabbitMQ',
  sqs: 'SQS',
  kafka: 'Kafka',
  servicebus: 'Service Bus',
  pubsub: 'Pub/Sub',
  memory: 'the memory broker',
};

/**
 * `consumer.start()` could not reach the broker: the adapter failed with the client's own
 * error (a refused connection, an unknown host, a timeout), kept as `cause`. The message
 * names the broker and the address tried, secrets redacted.
 *
 * @example
 * ```ts
 * await consumer.start().catch((error) => {
 *   if (isOncelyError(error, 'BROKER_UNREACHABLE')) console.error(error.message);
 *   // cannot connect to RabbitMQ at amqp://app:***@rabbit:5672: connect ECONNREFUSED 10.0.0.7:5672
 * });
 * ```
 */
export class BrokerConnectionError extends OncelyError {
  constructor(
    readonly brokerType: string,
    readonly address: string | undefined,
    options: ErrorOptions & { cause: unknown },
  ) {
    const cause = options.cause;
    const code = (cause as { code?: unknown } | null)?.code;
    const detail =
      cause instanceof Error
        ? `${cause.message || cause.name}${typeof code === 'string' && !cause.message.includes(code) ? ` (${code})` : ''}`
        : String(cause);
    super(
      'BROKER_UNREACHABLE',
      `cannot connect to ${BROKER_NAMES[brokerType] ?? brokerType}${address ? ` at ${redactSecrets(address)}` : ''}: ${detail}`,
      options,
    );
  }
}

/**
 * Hides the secrets an address or connection string may carry: the password of a URL
 * (`amqp://user:***@host`), and `password=`, `SharedAccessKey=` and `AccountKey=` values.
 *
 * @example
 * ```ts
 * redactSecrets('Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=app;SharedAccessKey=abc');
 * // 'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=app;SharedAccessKey=***'
 * ```
 */
export function redactSecrets(text: string): string {
  return text
    .replace(/(\/\/[^/:@\s]*):[^@\s/]*@/g, '$1:***@')
    .replace(/\b(password|SharedAccessKey|AccountKey|sig)=([^;&\s]*)/gi, '$1=***');
}

/**
 * True when `error` is an Oncely error (optionally with the given code), even across
 * duplicate copies of this package.
 */
export function isOncelyError(error: unknown, code?: OncelyErrorCode): error is OncelyError {
  if (typeof error !== 'object' || error === null || !(ONCELY_ERROR in error)) return false;
  return code === undefined || (error as OncelyError).code === code;
}
