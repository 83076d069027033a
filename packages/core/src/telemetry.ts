import {
  type Attributes,
  type BatchObservableCallback,
  type Context,
  type Counter,
  context,
  createContextKey,
  createNoopMeter,
  type Histogram,
  type Link,
  type Meter,
  type MeterProvider,
  metrics,
  ProxyTracerProvider,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  type TextMapPropagator,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';
import type {
  ConsumerEvent,
  ConsumerEventName,
  DeadLetterBacklog,
  Delivery,
  Envelope,
  Logger,
} from './types.js';

/**
 * The instrumentation scope name of Oncely's tracer and meter: filter or route Oncely's
 * spans and metrics by it.
 *
 * @example
 * ```ts
 * const oncelySpans = exporter.getFinishedSpans().filter((s) => s.instrumentationScope.name === INSTRUMENTATION_SCOPE);
 * ```
 */
export const INSTRUMENTATION_SCOPE = '@oncely/core';

/**
 * Where a consumer sends its OpenTelemetry spans and metrics. Each field falls back to
 * the provider registered with `@opentelemetry/api` (what an SDK's `start()` sets up):
 * without an SDK, every span and instrument is a no-op.
 *
 * @example
 * ```ts
 * const consumer = await createConsumer({ ...config, telemetry: { tracerProvider, meterProvider } });
 * ```
 */
export interface TelemetryConfig {
  /** @default the global tracer provider (`trace.getTracerProvider()`) */
  tracerProvider?: TracerProvider;
  /** @default the global meter provider (`metrics.getMeterProvider()`) */
  meterProvider?: MeterProvider;
  /**
   * Reads the producer's trace context from the message's attributes/headers.
   * @default the global propagator (W3C `traceparent`/`tracestate` with the Node SDK)
   */
  propagator?: TextMapPropagator;
}

/**
 * `messaging.system` per adapter type, as the OpenTelemetry messaging semantic
 * conventions spell it (the memory broker has no registered value).
 */
const MESSAGING_SYSTEM: Record<string, string> = {
  sqs: 'aws_sqs',
  pubsub: 'gcp_pubsub',
  servicebus: 'servicebus',
  rabbitmq: 'rabbitmq',
  kafka: 'kafka',
  memory: 'oncely_memory',
};

/**
 * Attribute names tried, in order, for the producer's `traceparent`: the W3C name; the
 * name `@google-cloud/pubsub` uses with its own tracing on; Azure's `Diagnostic-Id`
 * (a W3C traceparent value that `@azure/service-bus` sets when its tracing is on).
 */
const TRACEPARENT_ALIASES = ['traceparent', 'googclient_traceparent', 'Diagnostic-Id'];
const TRACESTATE_ALIASES = ['tracestate', 'googclient_tracestate'];

const attributeGetter: TextMapGetter<Readonly<Record<string, string>>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const aliases =
      key === 'traceparent' ? TRACEPARENT_ALIASES : key === 'tracestate' ? TRACESTATE_ALIASES : [key];
    for (const name of aliases) {
      const value = carrier[name];
      if (typeof value === 'string' && value !== '') return value;
    }
    return undefined;
  },
};

/**
 * The trace context a producer put in a message's attributes (W3C `traceparent` and
 * `tracestate`), as an OpenTelemetry `Context`; `ROOT_CONTEXT` when there is none.
 * Uses the global propagator unless one is passed.
 *
 * @example
 * ```ts
 * const parent = extractTraceContext(message.attributes);
 * trace.getSpanContext(parent)?.traceId; // the producer's trace
 * ```
 */
export function extractTraceContext(
  attributes: Readonly<Record<string, string>>,
  propagator?: TextMapPropagator,
): Context {
  return propagator
    ? propagator.extract(ROOT_CONTEXT, attributes, attributeGetter)
    : propagation.extract(ROOT_CONTEXT, attributes, attributeGetter);
}

/**
 * The active trace context as message attributes (`traceparent`, and `tracestate` when
 * set), through the global propagator: what the adapters' send helpers add to each
 * message, so the consumer's span joins the producer's trace. Empty without an SDK or
 * outside any span.
 *
 * @example
 * ```ts
 * await channel.publish('', 'orders', body, { headers: { ...traceHeaders(), 'message-id': id } });
 * ```
 */
export function traceHeaders(): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier;
}

/** What the API's global proxy delegates to while no SDK registered a tracer provider. */
const NOOP_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();
/** What every no-op meter hands out (the API returns the same instruments for all of them). */
const NOOP_METER = createNoopMeter();
const NOOP_COUNTER = NOOP_METER.createCounter('oncely.probe');
const NOOP_HISTOGRAM = NOOP_METER.createHistogram('oncely.probe');
const NOOP_OBSERVABLE_GAUGE = NOOP_METER.createObservableGauge('oncely.probe');

/**
 * How long one metric collection waits for the broker's dead-letter count
 * (`deadLetterBacklog`) before it observes nothing for that consumer: a broker that does
 * not answer must not hold up the collection of every other instrument.
 */
export const DEAD_LETTER_BACKLOG_TIMEOUT_MS = 5_000;
/** A context that only a real context manager makes active (the no-op one keeps the root). */
const PROBE_CONTEXT = ROOT_CONTEXT.setValue(createContextKey('oncely.probe'), true);
const isProbeActive = (): boolean => context.active() === PROBE_CONTEXT;

/**
 * True when a delivery span could be seen by anyone: a tracer provider was given or
 * registered, or a context manager would hand the producer's context to the handler.
 * Without an SDK the span, its attributes and its context are all no-ops, and skipping
 * them is most of the consumer's own CPU per message.
 */
function tracingObservable(provider: TracerProvider): boolean {
  if (!(provider instanceof ProxyTracerProvider) || provider.getDelegate() !== NOOP_TRACER_PROVIDER)
    return true;
  return context.with(PROBE_CONTEXT, isProbeActive);
}

/** One delivery's span and what the pipeline learned about it. */
interface DeliverySpan {
  span: Span;
  context: Context;
}

/** The counters, one per event name that has one. */
const COUNTERS: Partial<Record<ConsumerEventName, [name: string, description: string]>> = {
  received: ['oncely.messages.received', 'Deliveries that reached the pipeline'],
  processed: ['oncely.messages.processed', 'Messages whose marker and effect committed'],
  duplicate: ['oncely.messages.duplicates', 'Deliveries skipped because their marker existed'],
  payloadMismatch: [
    'oncely.messages.payload_mismatches',
    'Duplicates whose payload fingerprint differs from the first delivery of their ID',
  ],
  failed: ['oncely.messages.failed', 'Handler runs that threw or whose commit was refused'],
  retried: ['oncely.messages.retried', 'Failed messages scheduled again'],
  deadLettered: ['oncely.messages.dead_lettered', 'Messages sent to the dead-letter destination'],
  released: ['oncely.messages.released', 'Deliveries given back without counting an attempt'],
  leaseLost: ['oncely.leases.lost', 'Leases lost while a handler ran'],
  ackFailed: [
    'oncely.settlements.failed',
    "Acks (or other settlements) that failed after the decision, or were still pending when stop()'s grace ran out",
  ],
  takeover: ['oncely.leases.taken_over', 'Expired leased-mode claims taken over'],
  storeUnavailable: ['oncely.store.unavailable', 'Times the store became unavailable (fail closed)'],
};

/**
 * A consumer's OpenTelemetry side: a `process` span per delivery, parented on the trace
 * context the producer put in the message, and counters and a handler-duration
 * histogram fed by the consumer's events. A no-op without an SDK.
 */
export class Telemetry {
  /** Created at the first event, so an SDK started after the consumer was built still counts. */
  private instruments:
    | { counters: Map<ConsumerEventName, Counter>; duration: Histogram; noop: boolean }
    | undefined;
  private readonly spans = new WeakMap<Delivery, DeliverySpan>();
  private readonly tracerProvider: TracerProvider;
  private readonly baseAttributes: Attributes;

  constructor(
    consumer: string,
    private readonly brokerType: string,
    private readonly config: TelemetryConfig = {},
  ) {
    // The global tracer provider is a proxy that follows a later registration.
    this.tracerProvider = config.tracerProvider ?? trace.getTracerProvider();
    this.baseAttributes = {
      'messaging.system': MESSAGING_SYSTEM[brokerType] ?? brokerType,
      'messaging.consumer.group.name': consumer,
    };
  }

  /** Counts one consumer event. */
  record(name: ConsumerEventName, event: ConsumerEvent): void {
    // The global meter provider is not a proxy: look it up once there is something to count.
    this.instruments ??= this.createInstruments();
    const { counters, duration, noop } = this.instruments;
    // No-op instruments (no meter provider at the first event) stay no-ops: skip the attributes.
    if (noop) return;
    const attributes: Attributes = { ...this.baseAttributes };
    if (event.reason) attributes['oncely.dead_letter.reason'] = event.reason;
    if (name === 'failed' || name === 'ackFailed') attributes['error.type'] = errorType(event.error);
    counters.get(name)?.add(1, attributes);
    if (event.durationMs !== undefined && (name === 'processed' || name === 'failed')) {
      duration.record(event.durationMs / 1000, { ...this.baseAttributes, 'oncely.outcome': name });
    }
  }

  private meter(): Meter {
    return (this.config.meterProvider ?? metrics.getMeterProvider()).getMeter(INSTRUMENTATION_SCOPE);
  }

  /**
   * Registers this consumer's dead-letter gauges, `oncely.dead_letters.depth` and
   * `oncely.dead_letters.oldest_age` (ms), fed by one `read` per metric collection, and
   * returns what unregisters them (`stop()` calls it first: it also aborts a read still
   * running, and that collection observes nothing). Nothing is registered when the meter is
   * a no-op, as for the counters (the meter provider is looked up now, at start).
   *
   * Each collection waits at most `timeoutMs` for `read`; a read that fails, times out or
   * answers nothing observes nothing (never a made-up 0), and a read still running from an
   * earlier collection is not doubled: that collection observes nothing either, so a broker
   * that hangs holds at most one call. Reads that start failing are logged as a warning
   * (rate-limited), and their recovery at info: see {@link GaugeReadLog}.
   */
  observeDeadLetterBacklog(
    read: (signal: AbortSignal) => Promise<DeadLetterBacklog | undefined>,
    log: Logger,
    timeoutMs = DEAD_LETTER_BACKLOG_TIMEOUT_MS,
  ): () => void {
    const meter = this.meter();
    const depth = meter.createObservableGauge('oncely.dead_letters.depth', {
      description: "Messages in the consumer's dead-letter queue, as the broker counts them",
      unit: '{message}',
    });
    const oldestAge = meter.createObservableGauge('oncely.dead_letters.oldest_age', {
      description: "Time since the oldest message in the consumer's dead-letter queue was dead-lettered",
      unit: 'ms',
    });
    if (depth === NOOP_OBSERVABLE_GAUGE) return () => {};
    const failures = new GaugeReadLog(log, {
      failing:
        'dead-letter gauges: the broker does not report the dead-letter queue; the gauges observe nothing until it does',
      recovered: 'dead-letter gauges: the broker reports the dead-letter queue again',
    });
    let active = true;
    /** The read in progress, and what aborts it. */
    let reading: { settled: Promise<void>; controller: AbortController } | undefined;
    const callback: BatchObservableCallback = async (result) => {
      if (!active || reading) return;
      const controller = new AbortController();
      // A read that throws before its promise is made is a failed read too.
      const attempt = new Promise<DeadLetterBacklog | undefined>((resolve) =>
        resolve(read(controller.signal)),
      );
      const current = {
        controller,
        settled: attempt.then(
          () => {},
          () => {},
        ),
      };
      reading = current;
      void current.settled.finally(() => {
        if (reading === current) reading = undefined;
      });
      let backlog: DeadLetterBacklog | undefined;
      try {
        backlog = await settleWithin(attempt, timeoutMs, controller);
        if (backlog && !validCount(backlog.depth))
          throw new Error(`the adapter answered an invalid depth: ${String(backlog.depth)}`);
      } catch (error) {
        // Aborted by stop(): not a broker failure.
        if (active) failures.failed(error);
        return;
      }
      // Stopped meanwhile: the adapter may be closing, its answer is not worth reporting.
      if (!active) return;
      failures.succeeded();
      if (!backlog) return;
      const attributes: Attributes = { ...this.baseAttributes };
      // Which queue: consumers of one name on different queues are different series.
      if (typeof backlog.queue === 'string' && backlog.queue !== '')
        attributes['messaging.destination.name'] = backlog.queue;
      result.observe(depth, backlog.depth, attributes);
      if (typeof backlog.oldestAgeMs === 'number' && Number.isFinite(backlog.oldestAgeMs)) {
        // A clock a little behind the broker's gives a small negative age: a fresh one.
        result.observe(oldestAge, Math.max(0, backlog.oldestAgeMs), attributes);
      }
    };
    meter.addBatchObservableCallback(callback, [depth, oldestAge]);
    return () => {
      if (!active) return;
      active = false;
      meter.removeBatchObservableCallback(callback, [depth, oldestAge]);
      // The read running now is not waited for: end its broker call, and its collection.
      reading?.controller.abort(new Error('the consumer is stopping'));
    };
  }

  private createInstruments() {
    const meter = this.meter();
    const counters = new Map<ConsumerEventName, Counter>();
    for (const [event, [name, description]] of Object.entries(COUNTERS) as [
      ConsumerEventName,
      [string, string],
    ][]) {
      counters.set(event, meter.createCounter(name, { description, unit: '{message}' }));
    }
    const duration = meter.createHistogram('oncely.handler.duration', {
      description: 'Handler run including its commit (processed and failed runs)',
      unit: 's',
    });
    const noop = duration === NOOP_HISTOGRAM && [...counters.values()].every((c) => c === NOOP_COUNTER);
    return { counters, duration, noop };
  }

  /**
   * Starts the `process` span of a delivery, as a child of the producer's context (also
   * linked, as the semantic conventions advise), and runs `work` inside it.
   */
  aroundDelivery<T>(delivery: Delivery, work: () => Promise<T>): Promise<T> {
    if (!this.tracing()) return work();
    return this.inDeliverySpan(delivery, work);
  }

  /**
   * Whether a delivery's span could be seen; without, `aroundDelivery` only runs `work`,
   * and a caller may skip making it. Checked per delivery: the global provider may be
   * registered after the consumer started.
   */
  tracing(): boolean {
    return tracingObservable(this.tracerProvider);
  }

  private async inDeliverySpan<T>(delivery: Delivery, work: () => Promise<T>): Promise<T> {
    const { envelope } = delivery;
    const parent = extractTraceContext(envelope.attributes, this.config.propagator);
    const parentSpan = trace.getSpanContext(parent);
    const links: Link[] = parentSpan && trace.isSpanContextValid(parentSpan) ? [{ context: parentSpan }] : [];
    const tracer = this.tracerProvider.getTracer(INSTRUMENTATION_SCOPE);
    const span = tracer.startSpan(
      `process ${envelope.source}`,
      { kind: SpanKind.CONSUMER, attributes: this.spanAttributes(envelope), links },
      parent,
    );
    const spanContext = trace.setSpan(parent, span);
    this.spans.set(delivery, { span, context: spanContext });
    try {
      return await context.with(spanContext, work);
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: 'unexpected pipeline error' });
      throw error;
    } finally {
      span.end();
      this.spans.delete(delivery);
    }
  }

  /** The stable ID the consumer's ID strategy found (none: it is dead-lettered as `missing-id`). */
  identified(delivery: Delivery, messageId: string | undefined): void {
    const entry = this.spans.get(delivery);
    if (!entry || messageId === undefined) return;
    entry.span.setAttribute('oncely.message.id', messageId);
    const { envelope } = delivery;
    if (envelope.brokerMessageId === undefined && envelope.producerMessageId === undefined)
      entry.span.setAttribute('messaging.message.id', messageId);
  }

  /** Runs `work` in the delivery's span context (batch handlers run outside it otherwise). */
  within<T>(delivery: Delivery, work: () => T): T {
    const entry = this.spans.get(delivery);
    return entry ? context.with(entry.context, work) : work();
  }

  /**
   * What the pipeline decided for a delivery (`processed`, `duplicate`, `failed`,
   * `exhausted`, `busy`, `release`) and its attempt number.
   */
  outcome(delivery: Delivery, outcome: string, event: ConsumerEvent, error?: unknown): void {
    const entry = this.spans.get(delivery);
    if (!entry) return;
    entry.span.setAttribute('oncely.outcome', outcome);
    if (event.attempt !== undefined) entry.span.setAttribute('oncely.attempt', event.attempt);
    if (outcome === 'failed') {
      entry.span.recordException(toException(error));
      entry.span.setAttribute('error.type', errorType(error));
      entry.span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
    }
  }

  /** How the delivery was settled (`ack`, `retry`, `dead-letter`, `release`), and whether it worked. */
  settled(delivery: Delivery, what: string, event: ConsumerEvent, error?: unknown): void {
    const entry = this.spans.get(delivery);
    if (!entry) return;
    entry.span.setAttribute('oncely.settlement', what);
    if (event.reason) entry.span.setAttribute('oncely.dead_letter.reason', event.reason);
    if (error !== undefined) {
      entry.span.addEvent('settlement failed', { 'error.type': errorType(error), 'oncely.settlement': what });
    }
  }

  private spanAttributes(envelope: Envelope): Attributes {
    const attributes: Attributes = {
      ...this.baseAttributes,
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': envelope.source,
    };
    const brokerId = envelope.brokerMessageId ?? envelope.producerMessageId;
    if (brokerId !== undefined) attributes['messaging.message.id'] = brokerId;
    if (envelope.deliveryCount !== undefined) {
      attributes['oncely.delivery.count'] = envelope.deliveryCount;
      if (this.brokerType === 'servicebus')
        attributes['messaging.servicebus.message.delivery_count'] = envelope.deliveryCount;
      if (this.brokerType === 'pubsub')
        attributes['messaging.gcp_pubsub.message.delivery_attempt'] = envelope.deliveryCount;
    }
    if (envelope.redelivered !== undefined) attributes['oncely.redelivered'] = envelope.redelivered;
    if (envelope.orderingKey !== undefined) {
      attributes[this.brokerType === 'kafka' ? 'messaging.kafka.message.key' : 'oncely.ordering_key'] =
        envelope.orderingKey;
    }
    if (envelope.offset) {
      attributes['messaging.destination.partition.id'] = String(envelope.offset.partition);
      attributes['messaging.kafka.offset'] = Number(envelope.offset.offset);
    }
    return attributes;
  }
}

/**
 * `work`'s result, or a rejection after `timeoutMs` (and `controller` aborted, so the
 * adapter can end its broker call), or as soon as `controller` is aborted by someone else.
 * The timer does not keep the process alive.
 */
function settleWithin<T>(work: Promise<T>, timeoutMs: number, controller: AbortController): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const { signal } = controller;
  const cut = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    timer = setTimeout(() => controller.abort(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
  });
  return Promise.race([work, cut]).finally(() => {
    clearTimeout(timer);
    if (onAbort) signal.removeEventListener('abort', onAbort);
  });
}

/** A count: a non-negative integer. */
function validCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

/** How often at most {@link GaugeReadLog} warns that a gauge's reads started failing. */
export const GAUGE_READ_WARN_INTERVAL_MS = 5 * 60_000;

/**
 * The log of a gauge whose reads can fail (a broker or database that does not answer):
 * such a gauge simply has no point, so without a log nobody learns why. Warns when reads
 * start failing (the first failure, and each time they fail again after having worked),
 * at most once per `intervalMs` (a flapping broker does not flood the log; the
 * transitions in between go to debug), and logs at info when they work again after a
 * warned failure. Every further failure of a run of them is at debug.
 */
export class GaugeReadLog {
  private failing = false;
  private warned = false;
  private lastWarnAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly log: Logger,
    private readonly messages: { failing: string; recovered: string },
    private readonly fields: Record<string, unknown> = {},
    private readonly intervalMs = GAUGE_READ_WARN_INTERVAL_MS,
  ) {}

  failed(error: unknown): void {
    const fields = { ...this.fields, error };
    const now = Date.now();
    if (!this.failing) {
      this.failing = true;
      this.warned = now - this.lastWarnAt >= this.intervalMs;
      if (this.warned) {
        this.lastWarnAt = now;
        this.log.warn(this.messages.failing, fields);
        return;
      }
    }
    this.log.debug(this.messages.failing, fields);
  }

  succeeded(): void {
    if (!this.failing) return;
    this.failing = false;
    if (this.warned) this.log.info(this.messages.recovered, this.fields);
    this.warned = false;
  }
}

function errorType(error: unknown): string {
  if (error === undefined || error === null) return '_OTHER';
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code !== '') return code;
  return error instanceof Error ? error.name : '_OTHER';
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function toException(error: unknown): Error | string {
  return error instanceof Error ? error : String(error);
}
