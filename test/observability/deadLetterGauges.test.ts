import {
  type BrokerAdapter,
  type Consumer,
  createConsumerWith,
  DEAD_LETTER_BACKLOG_TIMEOUT_MS,
  type DeadLetterBacklog,
  DeadLetters,
  type Logger,
  silentLogger,
} from '@oncely/core';
import { createAdapter, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import type { MeterProvider } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { type MetricPoint, startDeltaMeter } from './otelSdk.js';

// The dead-letter gauges (`oncely.dead_letters.depth`, `oncely.dead_letters.oldest_age`)
// read back through the OpenTelemetry SDK's in-memory exporter (DELTA temporality: each
// collection shows only what its callbacks observed): exact on the memory
// broker, back to 0 after a replay and a discard; and the core's side of the contract
// with an adapter whose count fails or hangs: nothing observed, the collection not held
// up, no read after stop().

let sdk: ReturnType<typeof startDeltaMeter>;
let store: PostgresStore;
const cleanups: Array<() => Promise<void> | void> = [];
let run = 0;

beforeAll(async () => {
  sdk = startDeltaMeter();
  store = PostgresStore.embedded();
  await store.migrate();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await store?.close();
  await sdk?.shutdown();
});

/** The gauge points of one consumer, by metric name. */
function gaugesOf(points: MetricPoint[], consumer: string) {
  const of = (name: string) =>
    points.filter((p) => p.name === name && p.attributes['messaging.consumer.group.name'] === consumer);
  return { depth: of('oncely.dead_letters.depth'), age: of('oncely.dead_letters.oldest_age') };
}

/** A logger that keeps what it was told, by level. */
function spyLogger() {
  const lines: Array<{ level: keyof Logger; message: string; fields?: Record<string, unknown> }> = [];
  const at =
    (level: keyof Logger) =>
    (message: string, fields?: Record<string, unknown>): void => {
      lines.push({ level, message, fields });
    };
  const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  /** The lines of `level` about the dead-letter gauges. */
  const gaugeLines = (level: keyof Logger) =>
    lines.filter((line) => line.level === level && line.message.startsWith('dead-letter gauges'));
  return { logger, lines, gaugeLines };
}

/**
 * The test SDK's meter provider, recording which batch callbacks Oncely's meter added and
 * removed: a callback left registered but idle observes nothing either, so only this
 * shows a missing `removeBatchObservableCallback`.
 */
function recordingMeterProvider(inner: MeterProvider) {
  const added = new Set<unknown>();
  const removed = new Set<unknown>();
  const meterProvider: MeterProvider = {
    getMeter(name, version, options) {
      const meter = inner.getMeter(name, version, options);
      return new Proxy(meter, {
        get(target, property) {
          if (property === 'addBatchObservableCallback')
            return (callback: unknown, observables: unknown) => {
              added.add(callback);
              return target.addBatchObservableCallback(callback as never, observables as never);
            };
          if (property === 'removeBatchObservableCallback')
            return (callback: unknown, observables: unknown) => {
              removed.add(callback);
              return target.removeBatchObservableCallback(callback as never, observables as never);
            };
          const value = Reflect.get(target, property, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    },
  };
  return {
    meterProvider,
    added,
    /** Callbacks added and never removed. */
    registered: () => [...added].filter((callback) => !removed.has(callback)),
  };
}

interface ConsumerOptions {
  wrap?: (adapter: BrokerAdapter) => BrokerAdapter;
  name?: string;
  queue?: string;
  broker?: MemoryBroker;
  logger?: Logger;
  meterProvider?: MeterProvider;
}

/**
 * A memory consumer (not started) whose handler fails while `broken.on` (maxAttempts 1:
 * dead-lettered at once), with the test SDK's meter; `wrap` may change its adapter.
 */
function makeConsumer(options: ConsumerOptions = {}) {
  const { wrap = (a: BrokerAdapter) => a } = options;
  const name = options.name ?? `dlq-gauges-${++run}`;
  const queue = options.queue ?? `q-${++run}`;
  const broker = options.broker ?? new MemoryBroker();
  broker.createQueue(queue, { visibilityTimeoutMs: 5000 });
  const broken = { on: true };
  const config = {
    name,
    broker: { type: 'memory' as const, broker, queue },
    store,
    logger: options.logger ?? silentLogger,
    maxAttempts: 1,
    telemetry: { meterProvider: options.meterProvider ?? sdk.meterProvider },
    handler: async () => {
      if (broken.on) throw new Error('payment service down');
    },
  };
  const consumer: Consumer = createConsumerWith(config, (section, adapterOptions) =>
    wrap(createAdapter(section, adapterOptions)),
  );
  const spy = new ConsumerSpy().attach(consumer);
  if (!options.broker) cleanups.push(() => broker.close());
  cleanups.push(() => consumer.stop());
  return { name, queue, broker, broken, consumer, spy, config };
}

/** {@link makeConsumer}, started. */
async function startConsumer(
  wrap: (adapter: BrokerAdapter) => BrokerAdapter = (a) => a,
  options: ConsumerOptions = {},
) {
  const made = makeConsumer({ ...options, wrap });
  await made.consumer.start();
  return made;
}

/** When the oldest entry on `queue`'s dead-letter list was dead-lettered (epoch ms). */
function oldestDeadLetterAt(broker: MemoryBroker, queue: string): number {
  return Math.min(...broker.deadLetters(queue).map((letter) => letter.at));
}

describe('dead-letter gauges on the memory broker', () => {
  it('report the exact depth and the oldest age, and 0 after a replay and after a discard', async () => {
    const { name, queue, broker, broken, spy, config } = await startConsumer();
    const before = await sdk.metricPoints();
    // An empty queue: depth 0 and age 0 (a last age kept by a cumulative exporter would
    // keep an alert on it firing after the queue was emptied).
    expect(gaugesOf(before, name).depth.map((p) => p.value)).toEqual([0]);
    expect(gaugesOf(before, name).age.map((p) => p.value)).toEqual([0]);

    const firstSent = Date.now();
    for (let i = 0; i < 5; i++) await broker.send(queue, { id: `m-${i}`, body: { i } });
    await spy.waitForCount('deadLettered', 5, undefined, 30_000);
    const deadLettered = Date.now();

    // Waits until the age has visibly grown past the moment the last one was dead-lettered.
    const points = await waitFor(
      async () => {
        const now = await sdk.metricPoints();
        const { age } = gaugesOf(now, name);
        return age[0] && age[0].value >= 20 ? now : undefined;
      },
      { timeoutMs: 30_000, description: 'an oldest age of 20 ms or more' },
    );
    const collected = Date.now();
    const { depth, age } = gaugesOf(points, name);
    const oldestAt = oldestDeadLetterAt(broker, queue);
    expect(depth).toHaveLength(1);
    expect(depth[0]).toMatchObject({
      value: 5,
      unit: '{message}',
      scope: '@oncely/core',
      attributes: {
        'messaging.system': 'oncely_memory',
        'messaging.consumer.group.name': name,
        'messaging.destination.name': queue,
      },
    });
    expect(age).toHaveLength(1);
    expect(age[0]!.unit).toBe('ms');
    // The oldest entry's age at the collection: no older than the first send.
    expect(oldestAt).toBeGreaterThanOrEqual(firstSent);
    expect(oldestAt).toBeLessThanOrEqual(deadLettered);
    expect(age[0]!.value).toBeLessThanOrEqual(collected - oldestAt);
    expect(age[0]!.value).toBeGreaterThan(0);

    // Replay three of them (the handler works now): the depth follows.
    broken.on = false;
    const dlq = await DeadLetters.open(config);
    await dlq.replay({ ids: ['m-0', 'm-1', 'm-2'] });
    await spy.waitForCount('processed', 3, undefined, 30_000);
    // The age is now the oldest remaining entry's: read between these two instants.
    const remainingOldestAt = oldestDeadLetterAt(broker, queue);
    const before2 = Date.now();
    const replayed = gaugesOf(await sdk.metricPoints(), name);
    const after2 = Date.now();
    expect(replayed.depth.map((p) => p.value)).toEqual([2]);
    expect(replayed.age.map((p) => p.value)).toHaveLength(1);
    expect(replayed.age[0]!.value).toBeGreaterThanOrEqual(before2 - remainingOldestAt);
    expect(replayed.age[0]!.value).toBeLessThanOrEqual(after2 - remainingOldestAt);

    await dlq.discard({ all: true }, { by: 'gauge-test' });
    const after = gaugesOf(await sdk.metricPoints(), name);
    expect(after.depth.map((p) => p.value)).toEqual([0]);
    expect(after.age.map((p) => p.value)).toEqual([0]);
  });
});

describe('dead-letter gauges: the core side', () => {
  it('observe nothing, and do not throw, when the broker call fails', async () => {
    let calls = 0;
    const { name } = await startConsumer((adapter) =>
      Object.assign(adapter, {
        deadLetterBacklog: async (): Promise<DeadLetterBacklog> => {
          calls++;
          throw new Error('ECONNRESET');
        },
      }),
    );
    const points = await sdk.metricPoints();
    expect(calls).toBeGreaterThan(0);
    expect(gaugesOf(points, name)).toEqual({ depth: [], age: [] });
  });

  it('observe nothing, and do not throw, when the broker call throws before it returns a promise', async () => {
    let calls = 0;
    const logs = spyLogger();
    const { name } = await startConsumer(
      (adapter) =>
        Object.assign(adapter, {
          deadLetterBacklog: (): Promise<DeadLetterBacklog> => {
            calls++;
            throw new Error('client not ready');
          },
        }),
      { logger: logs.logger },
    );
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
    expect(calls).toBe(1);
    expect(logs.gaugeLines('warn')).toHaveLength(1);
    expect(String(logs.gaugeLines('warn')[0]!.fields?.error)).toContain('client not ready');
  });

  it('observe nothing for a depth that is not a count (negative, fractional, not a number)', async () => {
    const answers: unknown[] = [-1, 2.5, Number.NaN, '3'];
    const { name } = await startConsumer((adapter) =>
      Object.assign(adapter, {
        deadLetterBacklog: async () =>
          ({ depth: answers.shift(), queue: 'q' }) as unknown as DeadLetterBacklog,
      }),
    );
    for (let i = 0; i < 4; i++)
      expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
  });

  it('warn once when the broker stops answering (not at every collection), and log its recovery once', async () => {
    const logs = spyLogger();
    const failing = { on: true };
    const { name } = await startConsumer(
      (adapter) =>
        Object.assign(adapter, {
          deadLetterBacklog: async (): Promise<DeadLetterBacklog> => {
            if (failing.on) throw new Error('ECONNRESET');
            return { depth: 1, queue: 'q' };
          },
        }),
      { logger: logs.logger },
    );
    for (let i = 0; i < 3; i++) await sdk.metricPoints();
    expect(logs.gaugeLines('warn')).toHaveLength(1);
    expect(String(logs.gaugeLines('warn')[0]!.fields?.error)).toContain('ECONNRESET');
    expect(logs.gaugeLines('info')).toHaveLength(0);

    failing.on = false;
    for (let i = 0; i < 2; i++)
      expect(gaugesOf(await sdk.metricPoints(), name).depth.map((p) => p.value)).toEqual([1]);
    expect(logs.gaugeLines('info')).toHaveLength(1);
    expect(logs.gaugeLines('warn')).toHaveLength(1);
  });

  it('give up on a broker call that hangs after the timeout, abort it, observe nothing, and never double it', async () => {
    let calls = 0;
    let seen: AbortSignal | undefined;
    const { name } = await startConsumer((adapter) =>
      Object.assign(adapter, {
        deadLetterBacklog: (signal: AbortSignal): Promise<DeadLetterBacklog> => {
          calls++;
          seen = signal;
          // Never answers, not even when aborted: the worst a broker client can do.
          return new Promise(() => {});
        },
      }),
    );
    const started = Date.now();
    const points = await sdk.metricPoints();
    const took = Date.now() - started;
    expect(gaugesOf(points, name)).toEqual({ depth: [], age: [] });
    expect(took).toBeGreaterThanOrEqual(DEAD_LETTER_BACKLOG_TIMEOUT_MS - 100);
    expect(took).toBeLessThan(DEAD_LETTER_BACKLOG_TIMEOUT_MS + 10_000);
    // The adapter was told to end its call.
    expect(seen?.aborted).toBe(true);
    expect(String(seen?.reason)).toContain(`no answer within ${DEAD_LETTER_BACKLOG_TIMEOUT_MS} ms`);
    // The hung call is still pending: the next collection does not start another.
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
    expect(calls).toBe(1);
  }, 60_000);

  it('abort the read running when stop() is called, before stop() resolves, and end that collection', async () => {
    let seen: AbortSignal | undefined;
    const logs = spyLogger();
    const { name, consumer } = await startConsumer(
      (adapter) =>
        Object.assign(adapter, {
          deadLetterBacklog: (signal: AbortSignal): Promise<DeadLetterBacklog> => {
            seen = signal;
            return new Promise(() => {});
          },
        }),
      { logger: logs.logger },
    );
    // The read's timeout timer (DEAD_LETTER_BACKLOG_TIMEOUT_MS), watched: whether it fired
    // tells a collection ended by the stop from one that ran into the timeout, however
    // slowly the machine goes (a bound on the elapsed time did not).
    const readTimers: Array<{ fired: boolean }> = [];
    const realSetTimeout = globalThis.setTimeout;
    const watch = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((
      callback: (...args: unknown[]) => void,
      ms?: number,
      ...args: unknown[]
    ) => {
      if (ms !== DEAD_LETTER_BACKLOG_TIMEOUT_MS) return realSetTimeout(callback, ms, ...args);
      const timer = { fired: false };
      readTimers.push(timer);
      return realSetTimeout(() => {
        timer.fired = true;
        callback(...args);
      }, ms);
    }) as typeof setTimeout);
    let collecting: Promise<MetricPoint[]>;
    try {
      collecting = sdk.metricPoints();
      await waitFor(() => seen, { description: 'the read to start' });
    } finally {
      watch.mockRestore();
    }
    expect(readTimers).toHaveLength(1);
    expect(seen!.aborted).toBe(false);
    await consumer.stop();
    expect(seen!.aborted).toBe(true);
    // Aborted by the stop, not by the timeout.
    expect(String(seen!.reason)).toContain('the consumer is stopping');
    expect(String(seen!.reason)).not.toContain('no answer within');
    const points = await collecting;
    // The collection ended with the stop: the read's timeout never fired (ended, it is cleared).
    expect(readTimers[0]!.fired).toBe(false);
    expect(gaugesOf(points, name)).toEqual({ depth: [], age: [] });
    // A read aborted by stop() is no broker failure.
    expect(logs.gaugeLines('warn')).toHaveLength(0);
  }, 60_000);

  it('unregister at stop(), and do not ask the adapter once the consumer stopped', async () => {
    let calls = 0;
    const recording = recordingMeterProvider(sdk.meterProvider);
    const { name, consumer } = await startConsumer(
      (adapter) => {
        const read = adapter.deadLetterBacklog!.bind(adapter);
        return Object.assign(adapter, {
          deadLetterBacklog: (signal: AbortSignal) => {
            calls++;
            return read(signal);
          },
        });
      },
      { meterProvider: recording.meterProvider },
    );
    expect(gaugesOf(await sdk.metricPoints(), name).depth.map((p) => p.value)).toEqual([0]);
    expect(calls).toBe(1);
    expect(recording.added.size).toBe(1);
    expect(recording.registered()).toHaveLength(1);
    await consumer.stop();
    // The SDK no longer holds the callback (an idle one would observe nothing too).
    expect(recording.registered()).toEqual([]);
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
    expect(calls).toBe(1);
  });

  it('register nothing when stop() is called during start()', async () => {
    let calls = 0;
    const recording = recordingMeterProvider(sdk.meterProvider);
    const { name, consumer } = makeConsumer({
      meterProvider: recording.meterProvider,
      wrap: (adapter) => {
        const read = adapter.deadLetterBacklog!.bind(adapter);
        return Object.assign(adapter, {
          deadLetterBacklog: (signal: AbortSignal) => {
            calls++;
            return read(signal);
          },
        });
      },
    });
    const starting = consumer.start();
    await consumer.stop();
    await starting.catch(() => {});
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
    expect(calls).toBe(0);
    expect(recording.registered()).toEqual([]);
  });

  it('keep consumers of one name on different queues apart (messaging.destination.name)', async () => {
    const broker = new MemoryBroker();
    cleanups.push(() => broker.close());
    const name = `same-name-${++run}`;
    const a = await startConsumer(undefined, { name, queue: `a-${run}`, broker });
    const b = await startConsumer(undefined, { name, queue: `b-${run}`, broker });
    for (let i = 0; i < 3; i++) await broker.send(a.queue, { id: `m-${i}`, body: { i } });
    await a.spy.waitForCount('deadLettered', 3, undefined, 30_000);
    const { depth } = gaugesOf(await sdk.metricPoints(), name);
    expect(
      depth
        .map((p) => [p.attributes['messaging.destination.name'], p.value])
        .sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
    ).toEqual([
      [a.queue, 3],
      [b.queue, 0],
    ]);
  });

  it('register nothing for an adapter without the capability', async () => {
    const { name } = await startConsumer((adapter) =>
      Object.assign(adapter, { deadLetterBacklog: undefined }),
    );
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
  });
});
