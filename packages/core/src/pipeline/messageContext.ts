/**
 * The `ctx` a handler receives: its transaction, signal, logger, idempotency keys,
 * savepoints and outbox publishes.
 */
import { OncelyError } from '../errors.js';
import type { LeaseKeeper } from '../LeaseKeeper.js';
import type { PublishOptions } from '../outbox.js';
import { defaultPublishId, outboxOf, toOutboxWrite } from '../outbox.js';
import type { HandlerContext, IdempotencyStore, Logger } from '../types.js';

/**
 * A handler's `ctx`. A class, with `tx`, `signal` and `log` as getters on its prototype:
 * an object literal with getters is built through V8's runtime, about half a µs per
 * getter per message, where a class instance takes a few nanoseconds. The methods stay
 * own closures, so a handler may destructure them (`const { publish } = ctx`); a spread
 * (`{ ...ctx }`) copies own properties only, so it carries the methods and `attempt`.
 */
export class MessageContext<Tx> implements HandlerContext<Tx> {
  readonly idempotencyKey: (step: string) => string;
  readonly savepoint: <T>(work: () => Promise<T>) => Promise<T>;
  readonly publish: (destination: string, body: unknown, options?: PublishOptions) => Promise<string>;
  readonly attempt: number;
  readonly #tx: Tx | undefined;
  readonly #keeper: LeaseKeeper;
  readonly #consumerLog: Logger;
  readonly #consumer: string;
  readonly #messageId: string;
  /** Built when first read: most handlers never log. */
  #log: Logger | undefined;

  constructor(
    consumer: string,
    messageId: string,
    tx: Tx | undefined,
    attempt: number,
    keeper: LeaseKeeper,
    store: IdempotencyStore<Tx>,
    consumerLog: Logger,
  ) {
    this.attempt = attempt;
    this.#tx = tx;
    this.#keeper = keeper;
    this.#consumerLog = consumerLog;
    this.#consumer = consumer;
    this.#messageId = messageId;
    this.idempotencyKey = (step) => `${consumer}:${messageId}:${step}`;
    this.savepoint = (work) => {
      if (tx === undefined) {
        throw new OncelyError('CONSUMER_STATE', "ctx.savepoint is not available in 'leased' mode");
      }
      return store.savepoint(tx, work);
    };
    // Counts this run's publishes: a re-run starts again at 1 and writes the same IDs.
    let published = 0;
    this.publish = async (destination, body, options) => {
      if (tx === undefined) {
        throw new OncelyError(
          'CONSUMER_STATE',
          "ctx.publish is not available in 'leased' mode: no transaction covers the handler, so the message could not commit with its effect",
        );
      }
      const row = toOutboxWrite(destination, body, options, () =>
        defaultPublishId(consumer, messageId, ++published),
      );
      await outboxOf(store).write(tx, row);
      return row.id;
    };
  }

  get tx(): Tx {
    if (this.#tx === undefined) {
      throw new OncelyError(
        'CONSUMER_STATE',
        "ctx.tx is not available in 'leased' mode: the handler runs outside a transaction",
      );
    }
    return this.#tx;
  }

  /** The keeper creates its AbortSignal only for a handler that reads it. */
  get signal(): AbortSignal {
    return this.#keeper.signal;
  }

  get log(): Logger {
    this.#log ??= messageLogger(this.#consumerLog, { consumer: this.#consumer, messageId: this.#messageId });
    return this.#log;
  }
}

/** The consumer's logger with a message's fields added to every line. */
function messageLogger(log: Logger, fields: Record<string, unknown>): Logger {
  return {
    debug: (m, f) => log.debug(m, { ...fields, ...f }),
    info: (m, f) => log.info(m, { ...fields, ...f }),
    warn: (m, f) => log.warn(m, { ...fields, ...f }),
    error: (m, f) => log.error(m, { ...fields, ...f }),
  };
}
