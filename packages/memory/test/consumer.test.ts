import { type Consumer, createConsumer, loadConfig, silentLogger } from '@oncely/core';
import { createMemoryConsumer, MemoryBroker, randomFaults } from '@oncely/memory';
import { afterEach, describe, expect, it } from 'vitest';
import { type Cleanups, effectsPerId, newBroker, storeWithEffects } from './support.js';

/** Everything a test opened, closed in reverse order whatever the outcome. */
const cleanups: Cleanups = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function track<TBody>(consumer: Consumer<TBody>) {
  const counts = { received: 0, processed: 0, duplicate: 0, failed: 0, deadLettered: 0, ackFailed: 0 };
  for (const name of Object.keys(counts) as Array<keyof typeof counts>)
    consumer.on(name, () => counts[name]++);
  cleanups.push(() => consumer.stop());
  return counts;
}

describe('createConsumer on the memory broker with the embedded store', () => {
  it('applies each message once despite producer duplicates, lost acks and duplicate deliveries', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    const injected = { dropAck: 0, duplicateDelivery: 0 };
    const random = randomFaults({ seed: 3, dropAck: 0.3, duplicateDelivery: 0.2, maxDeliveryCount: 3 });
    broker.faults = {
      dropAck: (id, target) => random.dropAck!(id, target) && ++injected.dropAck > 0,
      duplicateDelivery: (id, target) =>
        random.duplicateDelivery!(id, target) && ++injected.duplicateDelivery > 0,
    };
    const consumer = await createConsumer({
      name: 'e2e-once',
      broker: { type: 'memory', broker, queue: 'orders', visibilityTimeoutMs: 200 },
      store,
      concurrency: 4,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query('INSERT INTO effects (message_id) VALUES ($1)', [message.id]);
      },
    });
    const counts = track(consumer);
    await consumer.start();

    const ids = Array.from({ length: 60 }, (_, i) => `order-${i}`);
    for (const id of ids) {
      const copies = Number(id.slice(6)) % 4 === 0 ? 3 : 1;
      for (let c = 0; c < copies; c++) await broker.send('orders', { id, body: { id } });
    }
    expect(await broker.waitForIdle('orders', { timeoutMs: 60_000 })).toBe(true);

    const effects = await effectsPerId(store);
    expect(effects.size).toBe(60);
    expect([...effects.values()].every((n) => n === 1)).toBe(true);
    expect(injected.dropAck).toBeGreaterThan(0);
    expect(injected.duplicateDelivery).toBeGreaterThan(0);
    expect(counts.processed).toBe(60);
    // 15 producer duplicates plus every redelivery: all recognised, none re-applied.
    expect(counts.duplicate).toBe(counts.received - 60);
    expect(counts.duplicate).toBeGreaterThanOrEqual(30 + injected.dropAck);
    expect(broker.deadLetters('orders')).toEqual([]);
  });

  it('retries a failed handler after the backoff, and dead-letters exhausted and ID-less messages', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    const attempts = new Map<string, number[]>();
    const consumer = createMemoryConsumer<{ kind: string }>({
      name: 'e2e-retry',
      broker: { broker, queue: 'work', visibilityTimeoutMs: 2000 },
      store,
      maxAttempts: 2,
      backoff: { initialMs: 150, maxMs: 150 },
      logger: silentLogger,
      handler: async (message, ctx) => {
        attempts.set(message.id, [...(attempts.get(message.id) ?? []), Date.now()]);
        await ctx.tx.query('INSERT INTO effects (message_id) VALUES ($1)', [message.id]);
        if (message.body.kind === 'broken' || (message.body.kind === 'flaky' && ctx.attempt === 1)) {
          throw new Error(`${message.body.kind} handler fails`);
        }
      },
    });
    const counts = track(consumer);
    await consumer.start();
    await broker.send('work', { id: 'flaky', body: { kind: 'flaky' } });
    await broker.send('work', { id: 'broken', body: { kind: 'broken' } });
    await broker.send('work', { body: { kind: 'no-id' } });
    expect(await broker.waitForIdle('work', { timeoutMs: 60_000 })).toBe(true);

    // The failed attempts rolled back their rows: one row for flaky, none for broken.
    expect(await effectsPerId(store)).toEqual(new Map([['flaky', 1]]));
    const [first, second] = attempts.get('flaky')!;
    expect(second! - first!).toBeGreaterThanOrEqual(140);
    expect(attempts.get('broken')).toHaveLength(2);
    const dead = broker.deadLetters('work').map((d) => [d.producerMessageId, d.reason]);
    expect(dead).toContainEqual(['broken', 'max-attempts']);
    expect(dead).toContainEqual([undefined, 'missing-id']);
    expect(dead).toHaveLength(2);
    expect(counts.deadLettered).toBe(2);
    // A processed message's counter is deleted (after its ack, hence the poll); the
    // dead-lettered one keeps its count until retention prunes it.
    const counters = async () => {
      const { rows } = await store.transaction((tx) =>
        tx.query<{ message_id: string; attempts: number }>(
          `SELECT message_id, attempts FROM oncely.attempts WHERE consumer = 'e2e-retry' ORDER BY message_id`,
        ),
      );
      return rows;
    };
    await expect.poll(counters).toEqual([{ message_id: 'broken', attempts: 2 }]);
  });

  it("takes a released run's count back before it gives the message back", async () => {
    // A released message can be redelivered at once; a run counted before the take-back
    // lands would see one attempt too many (at the limit: dead-lettered a run early).
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    const order: string[] = [];
    const forgetAttempt = store.forgetAttempt.bind(store);
    store.forgetAttempt = async (key) => {
      await new Promise((resolve) => setTimeout(resolve, 100));
      await forgetAttempt(key);
      order.push('count taken back');
    };
    const release = broker.release.bind(broker);
    broker.release = (receipt) => {
      order.push('message given back');
      return release(receipt);
    };
    let runs = 0;
    let heldRunStarted!: () => void;
    const heldRun = new Promise<void>((resolve) => {
      heldRunStarted = resolve;
    });
    const consumer = createMemoryConsumer({
      name: 'e2e-release-count',
      broker: { broker, queue: 'held', visibilityTimeoutMs: 5000 },
      store,
      // The held run is aborted after the first 500 ms; its release gets the next 500 ms.
      stopTimeoutMs: 500,
      backoff: { initialMs: 10, maxMs: 10 },
      logger: silentLogger,
      handler: async (_message, ctx) => {
        if (++runs === 1) throw new Error('the first run fails, so the second is a counted redelivery');
        heldRunStarted();
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
        throw ctx.signal.reason;
      },
    });
    const counts = track(consumer);
    await consumer.start();
    await broker.send('held', { id: 'held-1', body: {} });
    await heldRun;
    await consumer.stop();

    expect(order).toEqual(['count taken back', 'message given back']);
    expect(counts.failed).toBe(1);
    const { rows } = await store.transaction((tx) =>
      tx.query<{ attempts: number }>(
        `SELECT attempts FROM oncely.attempts WHERE consumer = 'e2e-release-count' AND message_id = 'held-1'`,
      ),
    );
    // One failed run on record; the released run left no count.
    expect(rows).toEqual([{ attempts: 1 }]);
  });

  it('renews the lease of a handler that runs longer than the visibility timeout', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    // The handler runs until its lease was renewed three times (1.5 visibilities), a wait on
    // the renewals themselves rather than a 1.5 s sleep against a 400 ms lease, which a
    // loaded machine's late timer let lapse. 2 s leaves a renewal a second to be late.
    const visibilityTimeoutMs = 2000;
    let renewals = 0;
    let ranMs = 0;
    const consumer = await createConsumer({
      name: 'e2e-slow',
      broker: { type: 'memory', broker, queue: 'slow', visibilityTimeoutMs },
      store,
      concurrency: 2,
      logger: silentLogger,
      handler: async (message, ctx) => {
        const started = Date.now();
        // (A plain loop: memory does not depend on @oncely/testkit, which depends on it.)
        while (renewals < 3 && !ctx.signal.aborted) await new Promise((resolve) => setTimeout(resolve, 20));
        ctx.signal.throwIfAborted();
        ranMs = Date.now() - started;
        await ctx.tx.query('INSERT INTO effects (message_id) VALUES ($1)', [message.id]);
      },
    });
    consumer.on('leaseRenewed', () => renewals++);
    const counts = track(consumer);
    await consumer.start();
    await broker.send('slow', { id: 'slow-1', body: {} });
    expect(await broker.waitForIdle('slow', { timeoutMs: 60_000 })).toBe(true);
    // The handler outlived its first lease (a lower bound: load only makes it longer).
    expect(ranMs).toBeGreaterThan(visibilityTimeoutMs);
    // Without renewal the lease would have lapsed and the message gone out again.
    expect(counts.received).toBe(1);
    expect(counts.ackFailed).toBe(0);
    expect(await effectsPerId(store)).toEqual(new Map([['slow-1', 1]]));
  }, 120_000);

  it('runs from a config in the environment, on the named broker the producer sends to', async () => {
    const queue = `from-env-${process.pid}`;
    const config = loadConfig({
      env: { ONCELY_NAME: 'e2e-env', ONCELY_BROKER_TYPE: 'memory', ONCELY_BROKER_QUEUE: queue },
    });
    expect(config.broker).toEqual({ type: 'memory', queue });
    const store = await storeWithEffects(cleanups);
    const consumer = await createConsumer({
      ...config,
      store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query('INSERT INTO effects (message_id) VALUES ($1)', [message.id]);
      },
    });
    const counts = track(consumer);
    await consumer.start();
    const broker = MemoryBroker.named();
    cleanups.push(() => broker.close());
    await broker.send(queue, { id: 'env-1', body: {} });
    await broker.send(queue, { id: 'env-1', body: {} });
    expect(await broker.waitForIdle(queue, { timeoutMs: 60_000 })).toBe(true);
    expect(counts.processed).toBe(1);
    expect(counts.duplicate).toBe(1);
    expect(await effectsPerId(store)).toEqual(new Map([['env-1', 1]]));
  });

  it('gives each name its own broker and a fresh one after close', () => {
    const a = MemoryBroker.named('a');
    expect(MemoryBroker.named('a')).toBe(a);
    expect(MemoryBroker.named('b')).not.toBe(a);
    a.close();
    MemoryBroker.named('b').close();
    const again = MemoryBroker.named('a');
    expect(again).not.toBe(a);
    expect(again.isClosed).toBe(false);
    again.close();
  });

  it('names the variable behind a bad broker option when the adapter checks it', async () => {
    const config = loadConfig({
      env: {
        ONCELY_NAME: 'e2e-env-bad',
        ONCELY_BROKER_TYPE: 'memory',
        ONCELY_BROKER_QUEUE: 'q',
        ONCELY_BROKER_VISIBILITY_TIMEOUT_MS: '0',
      },
    });
    const store = await storeWithEffects(cleanups);
    await expect(createConsumer({ ...config, store, handler: async () => {} })).rejects.toThrow(
      'Invalid Oncely config: broker.visibilityTimeoutMs (from ONCELY_BROKER_VISIBILITY_TIMEOUT_MS) must be an integer from 1',
    );
    const typo = loadConfig({
      env: { ONCELY_NAME: 'x', ONCELY_BROKER_TYPE: 'memory', ONCELY_BROKER_QUEU: 'q' },
    });
    await expect(createConsumer({ ...typo, store, handler: async () => {} })).rejects.toThrow(
      /broker\.queu \(from ONCELY_BROKER_QUEU\) is not a memory broker option/,
    );
  });
});
