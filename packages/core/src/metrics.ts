import type { ConsumerEvent, ConsumerEventName } from './types.js';

// Structural slice of @opentelemetry/api we use, so core has no hard dependency on it.
interface Counter {
  add(value: number, attributes?: Record<string, string>): void;
}
interface Histogram {
  record(value: number, attributes?: Record<string, string>): void;
}
interface Meter {
  createCounter(name: string, options?: { description?: string }): Counter;
  createHistogram(name: string, options?: { description?: string; unit?: string }): Histogram;
}

/**
 * OpenTelemetry counters (`oncely.messages{event}`) and a handler-duration histogram,
 * active only when `@opentelemetry/api` is installed; a no-op otherwise.
 */
export class Metrics {
  private counter: Counter | undefined;
  private duration: Histogram | undefined;

  async init(): Promise<void> {
    const moduleName = '@opentelemetry/api';
    try {
      const api = (await import(moduleName)) as { metrics: { getMeter(name: string): Meter } };
      const meter = api.metrics.getMeter('@oncely/core');
      this.counter = meter.createCounter('oncely.messages', { description: 'Consumer events by kind' });
      this.duration = meter.createHistogram('oncely.handler.duration', {
        description: 'Handler duration, including the commit',
        unit: 'ms',
      });
    } catch {
      // Not installed: metrics stay off.
    }
  }

  record(name: ConsumerEventName, event: ConsumerEvent): void {
    if (!this.counter) return;
    const attributes: Record<string, string> = { consumer: event.consumer, event: name };
    if (event.reason) attributes.reason = event.reason;
    this.counter.add(1, attributes);
    if (event.durationMs !== undefined && (name === 'processed' || name === 'failed')) {
      this.duration?.record(event.durationMs, { consumer: event.consumer, outcome: name });
    }
  }
}
