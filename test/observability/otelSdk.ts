import { context, propagation, type Span, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';

/**
 * A real OpenTelemetry SDK with in-memory exporters, as an application would wire one:
 * the W3C propagator and an AsyncLocalStorage context manager registered globally (what
 * the Node SDK's `start()` does), the providers handed to the consumer through its
 * `telemetry` config. `shutdown()` unregisters the globals again.
 */
export function startTestSdk() {
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // Exports only when flushed: the long interval never fires during a test.
  const reader = new PeriodicExportingMetricReader({
    exporter: metricExporter,
    exportIntervalMillis: 3_600_000,
  });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const tracer = tracerProvider.getTracer('test-producer');

  return {
    tracerProvider,
    meterProvider,
    tracer,
    /** Runs `work` inside a new active producer span and returns the span with the result. */
    async inSpan<T>(name: string, work: () => Promise<T>): Promise<{ span: Span; result: T }> {
      return tracer.startActiveSpan(name, async (span) => {
        try {
          return { span, result: await work() };
        } finally {
          span.end();
        }
      });
    },
    finishedSpans(): ReadableSpan[] {
      return spans.getFinishedSpans();
    },
    /** Current value of every counter and the count of every histogram, by metric name and attributes. */
    metricPoints: () => collectPoints(metricExporter, reader),
    async shutdown(): Promise<void> {
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
      contextManager.disable();
      context.disable();
      propagation.disable();
      trace.disable();
    },
  };
}

/**
 * A meter provider alone, exporting with DELTA temporality: each collection reports only
 * what was observed in it, so an observable instrument whose callback observed nothing
 * shows no point (with CUMULATIVE temporality the SDK repeats a series' last value).
 */
export function startDeltaMeter() {
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
  const reader = new PeriodicExportingMetricReader({
    exporter: metricExporter,
    exportIntervalMillis: 3_600_000,
  });
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    meterProvider,
    /** What this collection observed, by metric name and attributes. */
    metricPoints: () => collectPoints(metricExporter, reader),
    shutdown: () => meterProvider.shutdown(),
  };
}

async function collectPoints(
  metricExporter: InMemoryMetricExporter,
  reader: PeriodicExportingMetricReader,
): Promise<MetricPoint[]> {
  metricExporter.reset();
  await reader.forceFlush();
  const points: MetricPoint[] = [];
  for (const resource of metricExporter.getMetrics()) {
    for (const scope of resource.scopeMetrics) {
      for (const metric of scope.metrics) {
        for (const point of metric.dataPoints) {
          const value =
            metric.dataPointType === DataPointType.HISTOGRAM
              ? (point.value as { count: number }).count
              : (point.value as number);
          points.push({
            name: metric.descriptor.name,
            unit: metric.descriptor.unit,
            scope: scope.scope.name,
            attributes: point.attributes as Record<string, unknown>,
            value,
          });
        }
      }
    }
  }
  return points;
}

export interface MetricPoint {
  name: string;
  unit: string;
  scope: string;
  attributes: Record<string, unknown>;
  /** A counter's sum, a gauge's value, or a histogram's count. */
  value: number;
}

/** Sum of the points of `name` whose attributes include `where`. */
export function total(points: MetricPoint[], name: string, where: Record<string, unknown> = {}): number {
  return points
    .filter((p) => p.name === name && Object.entries(where).every(([k, v]) => p.attributes[k] === v))
    .reduce((sum, p) => sum + p.value, 0);
}

/** The consumer's `process` spans, in the order they finished. */
export function processSpans(spans: ReadableSpan[]): ReadableSpan[] {
  return spans.filter((s) => s.instrumentationScope.name === '@oncely/core');
}
