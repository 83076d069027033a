import { type AdapterRuntime, ConfigError, type Delivery, isOncelyError, silentLogger } from '@oncely/core';
import { createAdapter, diagnose, MemoryBroker } from '@oncely/memory';
import { afterEach, describe, expect, it } from 'vitest';

const brokers: MemoryBroker[] = [];
afterEach(() => {
  for (const broker of brokers.splice(0)) broker.close();
});

function newBroker(): MemoryBroker {
  const broker = new MemoryBroker();
  brokers.push(broker);
  return broker;
}

const options = { consumerName: 'test', log: silentLogger };

/**
 * The core's side of the adapter contract, reduced to what the pull loop uses: free
 * slots through whenReady(), and a dispatch that stays pending until the test settles
 * the delivery (as the core's does until the settlement is confirmed).
 */
function pullRuntime(concurrency: number) {
  const stopping = new AbortController();
  const held: Delivery[] = [];
  const finishers = new Map<Delivery, () => void>();
  let wake: (() => void) | undefined;
  let maxHeld = 0;
  let onDispatch: (() => void) | undefined;
  const runtime: AdapterRuntime = {
    consumerName: 'test',
    concurrency,
    mode: 'transactional',
    store: undefined as never,
    log: silentLogger,
    stopping: stopping.signal,
    reportError: () => {},
    async whenReady() {
      for (;;) {
        if (stopping.signal.aborted) return 0;
        const free = concurrency - held.length;
        if (free > 0) return free;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
    },
    dispatch(delivery) {
      held.push(delivery);
      maxHeld = Math.max(maxHeld, held.length);
      onDispatch?.();
      return new Promise<void>((resolve) => finishers.set(delivery, resolve));
    },
  };
  return {
    runtime,
    held,
    get maxHeld() {
      return maxHeld;
    },
    /** Resolves once `count` deliveries are held, or fails after the deadline. */
    waitForHeld(count: number): Promise<void> {
      return this.waitUntil(() => held.length >= count, `${count} deliveries dispatched`);
    },
    /**
     * Resolves once `condition` holds after a dispatch, or fails after the deadline: a bound
     * for a hang on a loaded machine, not a speed target (was 3 s; the test timeout is 120 s).
     */
    async waitUntil(condition: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      while (!condition()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 50);
          onDispatch = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    },
    async settle(delivery: Delivery, how: (d: Delivery) => Promise<void>): Promise<void> {
      await how(delivery);
      held.splice(held.indexOf(delivery), 1);
      finishers.get(delivery)?.();
      wake?.();
    },
    stop() {
      stopping.abort();
      wake?.();
    },
  };
}

describe('createAdapter: configuration', () => {
  it('names the offending field', () => {
    const broker = newBroker();
    const field = (config: Record<string, unknown>) => {
      try {
        createAdapter({ type: 'memory', ...config }, options);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as ConfigError).field;
      }
      throw new Error('expected a ConfigError');
    };
    expect(field({ broker: 42, queue: 'q' })).toBe('broker.broker');
    expect(field({ broker: {}, queue: 'q' })).toBe('broker.broker');
    expect(field({ broker })).toBe('broker.queue');
    expect(field({ broker, queue: '' })).toBe('broker.queue');
    expect(field({ broker, queue: 'q', visibilityTimeoutMs: 0 })).toBe('broker.visibilityTimeoutMs');
    expect(field({ broker, queue: 'q', maxBatch: 2.5 })).toBe('broker.maxBatch');
    expect(field({ broker, queue: 'q', visibilityTimeout: 5 })).toBe('broker.visibilityTimeout');
  });

  it("declares the lease (the queue's visibility unless overridden) and the message-id attribute as default ID", () => {
    const broker = newBroker();
    broker.createQueue('slow', { visibilityTimeoutMs: 1234 });
    expect(createAdapter({ type: 'memory', broker, queue: 'slow' }, options).lease).toEqual({
      extendByMs: 1234,
    });
    expect(createAdapter({ type: 'memory', broker, queue: 'new' }, options).lease).toEqual({
      extendByMs: 30_000,
    });
    const adapter = createAdapter(
      { type: 'memory', broker, queue: 'slow', visibilityTimeoutMs: 500 },
      options,
    );
    expect(adapter.lease).toEqual({ extendByMs: 500 });
    expect(adapter.defaultIdStrategy).toEqual({ attribute: 'message-id' });
    expect(adapter.type).toBe('memory');
  });
});

describe('MemoryAdapter: the pull loop', () => {
  it('fetches no more than the free slots, maps the envelope, and stops promptly while long-polling', async () => {
    const broker = newBroker();
    broker.createQueue('q', { fifo: true });
    for (let i = 1; i <= 5; i++)
      await broker.send('q', { id: `m${i}`, body: { i }, groupId: `g${i}`, attributes: { k: 'v' } });
    const adapter = createAdapter(
      { type: 'memory', broker, queue: 'q', visibilityTimeoutMs: 5000, pollWaitMs: 60_000 },
      options,
    );
    const test = pullRuntime(2);
    const started = Date.now();
    await adapter.start(test.runtime);
    await test.waitForHeld(2);
    expect(broker.stats('q')).toMatchObject({ inFlight: 2, visible: 3 });

    const first = test.held[0]!;
    expect(first.envelope).toMatchObject({
      body: { i: 1 },
      attributes: { k: 'v', 'message-id': 'm1' },
      producerMessageId: 'm1',
      deliveryCount: 1,
      redelivered: false,
      orderingKey: 'g1',
      source: 'q',
    });
    expect(first.envelope.brokerMessageId).toMatch(/./);
    // The 5 s visibility from the receive, bounded by clocks read before and after it (a
    // margin from now, as it was, fails when a loaded machine takes a second to get here).
    expect(first.leaseExpiresAt).toBeGreaterThanOrEqual(started + 5000);
    expect(first.leaseExpiresAt).toBeLessThanOrEqual(Date.now() + 5000);

    for (let settled = 0; settled < 5; settled++) {
      await test.waitForHeld(1);
      await test.settle(test.held[0]!, (d) => d.ack());
    }
    expect(test.maxHeld).toBe(2);
    expect(broker.stats('q')).toEqual({ visible: 0, inFlight: 0, delayed: 0, deadLettered: 0 });

    // The loop now waits in a 60 s long poll: stop must end it at once.
    const stopping = Date.now();
    test.stop();
    await adapter.stop();
    await adapter.close();
    // A third of the 60 s poll: a poll that stop() did not end cannot come in under it
    // (the test times out first), and a loaded machine does not reach it (it was 1 s).
    expect(Date.now() - stopping).toBeLessThan(20_000);
    await broker.send('q', { id: 'after-stop', body: 1 });
    expect(broker.stats('q')).toMatchObject({ visible: 1, inFlight: 0 });
  });

  it('maps retryLater, release, deadLetter and extendLease onto the broker', async () => {
    const broker = newBroker();
    for (const id of ['retry', 'release', 'dead', 'lost']) await broker.send('q', { id, body: id });
    const adapter = createAdapter({ type: 'memory', broker, queue: 'q', visibilityTimeoutMs: 5000 }, options);
    const test = pullRuntime(4);
    await adapter.start(test.runtime);
    await test.waitForHeld(4);
    const byId = new Map(test.held.map((d) => [d.envelope.producerMessageId, d]));

    await test.settle(byId.get('retry')!, (d) => d.retryLater(100));
    await test.settle(byId.get('release')!, (d) => d.release());
    await test.settle(byId.get('dead')!, (d) => d.deadLetter('max-attempts', 'failed 5 times'));
    const lost = byId.get('lost')!;
    await lost.extendLease!(1);
    // The 1 ms lease ran out and the message went out again: the old delivery's lease is gone.
    const has = (id: string, count: number) => () =>
      test.held.some((d) => d.envelope.producerMessageId === id && d.envelope.deliveryCount === count);
    await test.waitUntil(has('lost', 2), 'the redelivery of lost');
    const error = await lost.extendLease!(5000).catch((e: unknown) => e);
    expect(isOncelyError(error, 'LEASE_LOST')).toBe(true);
    await test.settle(lost, async () => {});
    await test.waitUntil(has('retry', 2), 'the delayed retry');

    const counts = new Map(test.held.map((d) => [d.envelope.producerMessageId, d.envelope.deliveryCount]));
    expect(counts).toEqual(
      new Map([
        ['release', 1],
        ['lost', 2],
        ['retry', 2],
      ]),
    );
    expect(test.held.find((d) => d.envelope.producerMessageId === 'lost')!.envelope.redelivered).toBe(true);
    expect(broker.deadLetters('q')).toMatchObject([
      { producerMessageId: 'dead', reason: 'max-attempts', detail: 'failed 5 times' },
    ]);
    test.stop();
    await adapter.stop();
  });

  it('start() rejects on a closed broker', async () => {
    const broker = newBroker();
    const adapter = createAdapter({ type: 'memory', broker, queue: 'q' }, options);
    broker.close();
    await expect(adapter.start(pullRuntime(1).runtime)).rejects.toThrow(/closed/);
  });
});

describe('diagnose', () => {
  const base = { name: 'c', store: {} as never, handler: async () => {} };

  it('reports a broken broker section as an error finding', async () => {
    const report = await diagnose({ ...base, broker: { type: 'memory', broker: {}, queue: 'q' } as never });
    expect(report.broker).toBe('memory');
    expect(report.findings).toMatchObject([
      { level: 'error', message: expect.stringContaining('broker.broker') },
    ]);
  });

  it('reports the queue state and a maxDeliveries that does not leave room for maxAttempts', async () => {
    const broker = newBroker();
    broker.createQueue('q', { maxDeliveries: 3 });
    await broker.send('q', { id: 'a', body: 1 });
    const report = await diagnose({
      ...base,
      maxAttempts: 5,
      broker: { type: 'memory', broker, queue: 'q' },
    });
    const messages = report.findings.map((f) => `${f.level}: ${f.message}`);
    expect(messages).toContainEqual(expect.stringMatching(/^ok: queue 'q': 1 visible/));
    expect(messages).toContainEqual(expect.stringMatching(/^warn: queue maxDeliveries \(3\)/));
    expect(report.findings.some((f) => f.level === 'error')).toBe(false);
  });
});
