import {
  type BrokerAdapter,
  type Consumer,
  createConsumerWith,
  DEAD_LETTER_BACKLOG_TIMEOUT_MS,
  type DeadLetterBacklog,
  DeadLetters,
  silentLogger,
} from '@oncely/core';
import { createAdapter, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
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

/**
 * A memory consumer whose handler fails while `broken.on` (maxAttempts 1: dead-lettered at
 * once), with the test SDK's meter; `wrap` may change its adapter.
 */
async function startConsumer(wrap: (adapter: BrokerAdapter) => BrokerAdapter = (a) => a) {
  const name = `dlq-gauges-${++run}`;
  const queue = `q-${run}`;
  const broker = new MemoryBroker();
  broker.createQueue(queue, { visibilityTimeoutMs: 5000 });
  const broken = { on: true };
  const config = {
    name,
    broker: { type: 'memory' as const, broker, queue },
    store,
    logger: silentLogger,
    maxAttempts: 1,
    telemetry: { meterProvider: sdk.meterProvider },
    handler: async () => {
      if (broken.on) throw new Error('payment service down');
    },
  };
  const consumer: Consumer = createConsumerWith(config, (section, options) =>
    wrap(createAdapter(section, options)),
  );
  const spy = new ConsumerSpy().attach(consumer);
  cleanups.push(() => broker.close());
  cleanups.push(() => consumer.stop());
  await consumer.start();
  return { name, queue, broker, broken, consumer, spy, config };
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
    expect(depth).toHaveLength(1);
    expect(depth[0]).toMatchObject({
      value: 5,
      unit: '{message}',
      scope: '@oncely/core',
      attributes: { 'messaging.system': 'oncely_memory', 'messaging.consumer.group.name': name },
    });
    expect(age).toHaveLength(1);
    expect(age[0]!.unit).toBe('ms');
    // No older than the first send, no younger than the gap since the last dead letter.
    expect(age[0]!.value).toBeLessThanOrEqual(collected - firstSent);
    expect(age[0]!.value).toBeGreaterThan(0);
    expect(deadLettered).toBeLessThanOrEqual(collected);

    // Replay three of them (the handler works now): the depth follows.
    broken.on = false;
    const dlq = await DeadLetters.open(config);
    await dlq.replay({ ids: ['m-0', 'm-1', 'm-2'] });
    await spy.waitForCount('processed', 3, undefined, 30_000);
    const replayed = gaugesOf(await sdk.metricPoints(), name);
    expect(replayed.depth.map((p) => p.value)).toEqual([2]);
    expect(replayed.age[0]!.value).toBeGreaterThanOrEqual(age[0]!.value);

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

  it('give up on a broker call that hangs after the timeout, observe nothing, and never double it', async () => {
    let calls = 0;
    const { name } = await startConsumer((adapter) =>
      Object.assign(adapter, {
        deadLetterBacklog: (signal: AbortSignal): Promise<DeadLetterBacklog> => {
          calls++;
          // Never answers, not even when aborted: the worst a broker client can do.
          void signal;
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
    // The hung call is still pending: the next collection does not start another.
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
    expect(calls).toBe(1);
  }, 60_000);

  it('do not ask the adapter once the consumer stopped', async () => {
    let calls = 0;
    const { name, consumer } = await startConsumer((adapter) => {
      const read = adapter.deadLetterBacklog!.bind(adapter);
      return Object.assign(adapter, {
        deadLetterBacklog: (signal: AbortSignal) => {
          calls++;
          return read(signal);
        },
      });
    });
    expect(gaugesOf(await sdk.metricPoints(), name).depth.map((p) => p.value)).toEqual([0]);
    expect(calls).toBe(1);
    await consumer.stop();
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
    expect(calls).toBe(1);
  });

  it('register nothing for an adapter without the capability', async () => {
    const { name } = await startConsumer((adapter) =>
      Object.assign(adapter, { deadLetterBacklog: undefined }),
    );
    expect(gaugesOf(await sdk.metricPoints(), name)).toEqual({ depth: [], age: [] });
  });
});
