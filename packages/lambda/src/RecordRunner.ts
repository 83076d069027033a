import type {
  BodyFormat,
  Envelope,
  Handler,
  HandlerContext,
  IdempotencyStore,
  IdStrategy,
  Logger,
  Message,
  OrderedBatchItemResult,
  PayloadFingerprintOption,
  PayloadMismatch,
  SqlClient,
} from '@oncely/core';
import {
  ConfigError,
  decodeBody,
  defaultPublishId,
  describeIdStrategy,
  fingerprintDelivery,
  outboxOf,
  processBatchOnce,
  processOnce,
  resolveMessageId,
  stderrLogger,
  toLogger,
  toOutboxWrite,
  validateFingerprintOptions,
} from '@oncely/core';

/**
 * Options every Lambda handler takes.
 *
 * @example
 * ```ts
 * const options: LambdaHandlerOptions = { name: 'payments', store, handler: async (message, ctx) => {} };
 * ```
 */
export interface LambdaHandlerOptions<TBody = unknown> {
  /** Consumer name: the namespace of processed IDs (share it with a consumer to share dedup state). */
  name: string;
  /** The Oncely store; the processed marker and the handler's `ctx.tx` writes commit in one of its transactions. */
  store: IdempotencyStore<SqlClient>;
  /** Runs once per new record, inside the record's transaction. Throwing rolls it back and reports the record failed. */
  handler: Handler<TBody>;
  /**
   * Where the stable ID comes from (see `IdStrategy` in @oncely/core). A record without one
   * is reported failed and logged, never processed unprotected: the event source's
   * redrive policy / on-failure destination then takes it.
   * @default { attribute: 'message-id' } (the same default as the consumers)
   */
  idStrategy?: IdStrategy;
  /** @default 'json' */
  bodyFormat?: BodyFormat;
  /**
   * `ctx.signal` aborts this long before the invocation's deadline
   * (`context.getRemainingTimeInMillis()`), so a handler can stop before Lambda kills it.
   * @default 1000
   */
  deadlineMarginMs?: number;
  /**
   * Stores a fingerprint of the payload with the processed marker (as the consumers'
   * option of the same name does): a later record with the same ID and a different
   * payload is logged and follows `onPayloadMismatch`. Markers written without one never
   * mismatch. The store must keep fingerprints (`@oncely/postgres`).
   * @default false
   */
  payloadFingerprint?: PayloadFingerprintOption<TBody>;
  /**
   * What a payload mismatch does: `'skip'` treats the record as a duplicate (a success,
   * logged as a warning); `'dead-letter'` reports it failed every time, so the event
   * source's redrive policy or on-failure destination takes it.
   * @default 'skip'
   */
  onPayloadMismatch?: 'skip' | 'dead-letter';
  /** @default core's stderr logger */
  logger?: Logger;
}

/**
 * The minimal part of the Lambda `Context` used here.
 *
 * @example
 * ```ts
 * await handler(event, { getRemainingTimeInMillis: () => 30_000 });
 * ```
 */
export interface LambdaContextLike {
  getRemainingTimeInMillis?(): number;
}

/**
 * One record translated for the core, with the identifier the event source wants back in
 * its partial batch response (SQS: the `messageId`; Kafka: `{ partition, offset }`).
 *
 * @example
 * ```ts
 * const prepared: PreparedRecord = prepareSqsRecord(event.Records[0]);
 * ```
 */
export interface PreparedRecord<TIdentifier = string> {
  itemIdentifier: TIdentifier;
  envelope: Envelope;
  /** Records with the same group key keep their order (FIFO group, Kafka partition). */
  group?: string;
  /** Receive count kept by the event source, when it keeps one. */
  receiveCount?: number;
  /** Why the record's body cannot be what its event source sends (the record is reported failed, unrun). */
  invalidBody?: string;
}

/**
 * What happened to one record. `unavailable`: the store could not be reached — the
 * record failed and the rest of the batch is not tried (fail closed, fast).
 */
export type RecordOutcome = 'processed' | 'duplicate' | 'failed' | 'skipped' | 'unavailable';

/** Shared by the SQS and Kafka handlers: ID resolution, body decoding, the transaction. */
export class RecordRunner<TBody> {
  readonly log: Logger;
  private readonly idStrategy: IdStrategy;
  private readonly bodyFormat: BodyFormat;
  private readonly marginMs: number;

  constructor(
    private readonly options: LambdaHandlerOptions<TBody>,
    private readonly broker: string,
  ) {
    if (typeof options !== 'object' || options === null)
      throw new ConfigError('lambda', 'options are required');
    if (typeof options.name !== 'string' || options.name.trim() === '') {
      throw new ConfigError('name', 'must be a non-empty string (the consumer name)');
    }
    if (!options.store || typeof options.store.transaction !== 'function') {
      throw new ConfigError('store', 'must be an Oncely store (for example a PostgresStore)');
    }
    if (typeof options.handler !== 'function') throw new ConfigError('handler', 'must be a function');
    validateFingerprintOptions(options.payloadFingerprint, options.onPayloadMismatch);
    this.idStrategy = options.idStrategy ?? { attribute: 'message-id' };
    this.bodyFormat = options.bodyFormat ?? 'json';
    this.marginMs = options.deadlineMarginMs ?? 1000;
    this.log = toLogger(options.logger ?? stderrLogger);
  }

  /** The invocation's deadline: `signal` aborts `deadlineMarginMs` before Lambda's own. */
  deadline(context: LambdaContextLike | undefined): InvocationDeadline {
    const controller = new AbortController();
    const remaining = context?.getRemainingTimeInMillis?.();
    if (remaining === undefined) {
      return { signal: controller.signal, remainingMs: () => undefined, dispose: () => {} };
    }
    const abortAt = Date.now() + Math.max(0, remaining - this.marginMs);
    const timer = setTimeout(
      () => controller.abort(new Error('the Lambda invocation is about to time out')),
      abortAt - Date.now(),
    );
    timer.unref();
    return {
      signal: controller.signal,
      remainingMs: () => Math.max(0, abortAt - Date.now()),
      dispose: () => clearTimeout(timer),
    };
  }

  /** Resolves ID and body; `undefined` (logged) when the record cannot be processed safely. */
  private toMessage(record: PreparedRecord<unknown>): Message<TBody> | undefined {
    const id = resolveMessageId(this.idStrategy, record.envelope);
    if (id === undefined) {
      this.log.error(
        `oncely/lambda: record has no ID under ${describeIdStrategy(this.idStrategy)}; reported failed (poison: it reaches the redrive policy / on-failure destination)`,
        { consumer: this.options.name, itemIdentifier: record.itemIdentifier, reason: 'missing-id' },
      );
      return undefined;
    }
    let body: TBody;
    try {
      if (record.invalidBody !== undefined) throw new TypeError(record.invalidBody);
      body = decodeBody(this.bodyFormat, record.envelope.body) as TBody;
    } catch (error) {
      this.log.error('oncely/lambda: record body cannot be decoded; reported failed', {
        consumer: this.options.name,
        messageId: id,
        reason: 'invalid-body',
        error,
      });
      return undefined;
    }
    return {
      id,
      body,
      attributes: record.envelope.attributes,
      deliveryAttempt: record.receiveCount,
      redelivered: record.receiveCount === undefined ? undefined : record.receiveCount > 1,
      orderingKey: record.envelope.orderingKey,
      sequence: record.envelope.sequence,
      source: record.envelope.source,
      broker: this.broker,
      raw: record.envelope.raw,
    };
  }

  /** The record's payload fingerprint under `payloadFingerprint`; undefined when off. */
  private fingerprint(record: PreparedRecord<unknown>, message: Message<TBody>): string | undefined {
    return fingerprintDelivery(this.options.payloadFingerprint, record.envelope, message);
  }

  /**
   * A duplicate whose payload differs from the one that was processed: logged, then a
   * success (`'skip'`) or a failure the event source's redrive takes (`'dead-letter'`).
   */
  private onMismatch(message: Message<TBody>, mismatch: PayloadMismatch): RecordOutcome {
    const deadLetter = this.options.onPayloadMismatch === 'dead-letter';
    this.log.warn(
      deadLetter
        ? 'oncely/lambda: a record reuses a processed ID with a different payload; reported failed (it reaches the redrive policy / on-failure destination)'
        : 'oncely/lambda: a record reuses a processed ID with a different payload; skipped as a duplicate',
      { consumer: this.options.name, messageId: message.id, reason: 'payload-mismatch', ...mismatch },
    );
    return deadLetter ? 'failed' : 'duplicate';
  }

  private context(message: Message<TBody>, tx: SqlClient, signal: AbortSignal): HandlerContext {
    const { name, store } = this.options;
    // Counts this run's publishes: a re-run writes the same outbox IDs.
    let published = 0;
    return {
      tx,
      idempotencyKey: (step) => `${name}:${message.id}:${step}`,
      savepoint: (work) => store.savepoint(tx, work),
      publish: async (destination, body, options) => {
        const row = toOutboxWrite(destination, body, options, () =>
          defaultPublishId(name, message.id, ++published),
        );
        await outboxOf(store).write(tx, row);
        return row.id;
      },
      signal,
      attempt: message.deliveryAttempt ?? 1,
      log: this.log,
    };
  }

  /** Runs one record once (marker and effect in one transaction). Never rejects. */
  async runOne(record: PreparedRecord<unknown>, signal: AbortSignal): Promise<RecordOutcome> {
    const message = this.toMessage(record);
    if (!message) return 'failed';
    try {
      const outcome = await processOnce(
        this.options.store,
        { consumer: this.options.name, messageId: message.id },
        (tx) => this.options.handler(message, this.context(message, tx, signal)),
        { fingerprint: this.fingerprint(record, message) },
      );
      if (outcome.status === 'duplicate' && outcome.payloadMismatch)
        return this.onMismatch(message, outcome.payloadMismatch);
      return outcome.status;
    } catch (error) {
      if (this.options.store.classifyError(error) === 'unavailable') {
        this.log.error(
          'oncely/lambda: the store is unavailable; the rest of the batch is reported for retry',
          {
            consumer: this.options.name,
            messageId: message.id,
            error,
          },
        );
        return 'unavailable';
      }
      this.log.warn('oncely/lambda: record failed; reported for retry', {
        consumer: this.options.name,
        messageId: message.id,
        error,
      });
      return 'failed';
    }
  }

  /**
   * The fast path: the records in one transaction with one claim statement
   * (`processBatchOnce`); a failing record rolls back alone and is reported.
   *
   * Near the invocation's deadline the batch runs in rounds, so that what fits commits:
   * a round stops starting records once half the time left before `ctx.signal` aborts
   * has passed (counted from its first record) and commits what ran; the next round takes
   * the rest. A batch that fits in half the time is one round, one transaction. A record
   * still running when `ctx.signal` aborts loses at most its own round, never the rounds
   * committed before it; what was not committed is reported and comes back.
   */
  async runBatch(
    records: readonly PreparedRecord<unknown>[],
    deadline: InvocationDeadline,
  ): Promise<RecordOutcome[]> {
    const messages = records.map((record) => this.toMessage(record));
    // Not runnable (no ID, undecodable): failed. Runnable but not committed: skipped (reported).
    const outcomes: RecordOutcome[] = messages.map((message) => (message ? 'skipped' : 'failed'));
    let pending = messages.flatMap((message, index) => (message ? [{ message, index }] : []));
    while (pending.length > 0 && !deadline.signal.aborted) {
      const round = new RoundCutoff(deadline);
      let results: OrderedBatchItemResult<unknown>[];
      try {
        results = await processBatchOnce(
          this.options.store,
          this.options.name,
          pending.map(({ message, index }) => ({
            messageId: message.id,
            fingerprint: this.fingerprint(records[index]!, message),
            work: (tx: SqlClient) => {
              round.started();
              return this.options.handler(message, this.context(message, tx, deadline.signal));
            },
          })),
          { stopStarting: round.signal },
        );
      } catch (error) {
        // The round's transaction failed as a whole (store outage): nothing of it
        // committed; it and the rest are reported for retry.
        this.log.error('oncely/lambda: the batch transaction failed; its records are reported for retry', {
          error,
        });
        break;
      } finally {
        round.dispose();
      }
      const notStarted: typeof pending = [];
      results.forEach((result, i) => {
        const { message, index } = pending[i]!;
        if (result.status === 'released') notStarted.push(pending[i]!);
        else if (result.status === 'duplicate' && result.payloadMismatch)
          outcomes[index] = this.onMismatch(message, result.payloadMismatch);
        else if (result.status === 'failed') {
          this.log.warn('oncely/lambda: record failed; reported for retry', {
            consumer: this.options.name,
            messageId: message.id,
            error: result.error,
          });
          outcomes[index] = 'failed';
        } else outcomes[index] = result.status;
      });
      pending = notStarted;
    }
    return outcomes;
  }
}

/**
 * The invocation's deadline as the runner sees it.
 *
 * @example
 * ```ts
 * const deadline: InvocationDeadline = runner.deadline(context);
 * ```
 */
export interface InvocationDeadline {
  /** Aborts `deadlineMarginMs` before the invocation times out; handlers get it as `ctx.signal`. */
  signal: AbortSignal;
  /** Milliseconds until `signal` aborts; undefined when the context tells no deadline. */
  remainingMs(): number | undefined;
  dispose(): void;
}

/**
 * When a batch round stops starting records: half the time left before the deadline's
 * signal, counted from the round's first record (so every round starts at least one).
 */
class RoundCutoff {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private armed = false;

  constructor(private readonly deadline: InvocationDeadline) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  started(): void {
    if (this.armed) return;
    this.armed = true;
    const remaining = this.deadline.remainingMs();
    if (remaining === undefined) return;
    this.timer = setTimeout(() => this.controller.abort(), Math.floor(remaining / 2));
    this.timer.unref();
  }

  dispose(): void {
    clearTimeout(this.timer);
  }
}
