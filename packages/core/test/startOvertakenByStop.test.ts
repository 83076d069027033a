/**
 * A stop() that overtakes a start(): stop() is called while start() still waits for the
 * store's ping, the check that comes before the adapter starts. Before the fix start()
 * went on once the ping answered and called adapter.start() on an adapter stop() had
 * already closed, so the consumer began receiving after stop() had resolved (and a store
 * the consumer built from its config was already closed under it). Now such a start()
 * resolves without starting the adapter; if the ping fails it rejects with that error,
 * and the adapter is closed once, by stop(), either way.
 */
import { describe, expect, it } from 'vitest';
import type { AdapterRuntime, BrokerAdapter, IdempotencyStore, TypedBrokerConfig } from '../src/index.js';
import { Consumer, silentLogger } from '../src/index.js';

/** A store whose ping() answers when the test says so; nothing else is reached here. */
function gatedStore() {
  let answer!: (error?: Error) => void;
  let pinged!: () => void;
  const pingCalled = new Promise<void>((resolve) => {
    pinged = resolve;
  });
  const store = {
    transaction: async () => {
      throw new Error('not reached: no delivery in this test');
    },
    claim: async () => new Set<string>(),
    classifyError: () => 'other',
    ping: () => {
      pinged();
      return new Promise<void>((resolve, reject) => {
        answer = (error) => (error ? reject(error) : resolve());
      });
    },
  } as unknown as IdempotencyStore;
  return {
    store,
    /** Resolves once start() is waiting for the ping. */
    pingCalled,
    /** Answers the ping: with `error`, a failed one. */
    answer: (error?: Error) => answer(error),
  };
}

/** An adapter that records the lifecycle calls it gets, in order. */
class RecordingAdapter implements BrokerAdapter {
  readonly type = 'recording';
  readonly defaultIdStrategy = { attribute: 'message-id' } as const;
  readonly calls: string[] = [];
  async start(_runtime: AdapterRuntime): Promise<void> {
    this.calls.push('start');
  }
  async stop(): Promise<void> {
    this.calls.push('stop');
  }
  async close(): Promise<void> {
    this.calls.push('close');
  }
}

function consumerOn(store: IdempotencyStore, adapter: BrokerAdapter) {
  return new Consumer(
    {
      name: 'overtaken',
      broker: { type: 'memory' } as TypedBrokerConfig,
      store,
      handler: async () => {},
      logger: silentLogger,
    },
    adapter,
  );
}

describe('a start() that a stop() overtook', () => {
  it('resolves without starting the adapter once the store answers', async () => {
    const { store, pingCalled, answer } = gatedStore();
    const adapter = new RecordingAdapter();
    const consumer = consumerOn(store, adapter);
    const starting = consumer.start();
    await pingCalled;
    await consumer.stop();
    const closedAtStop = [...adapter.calls];
    answer();
    await expect(starting).resolves.toBeUndefined();
    expect(closedAtStop).toContain('close');
    expect(adapter.calls, 'adapter calls after start() resolved').not.toContain('start');
    expect(adapter.calls.filter((call) => call === 'close')).toHaveLength(1);
    // Stopped for good: a later stop() is a no-op and a later start() is refused.
    await consumer.stop();
    await expect(consumer.start()).rejects.toMatchObject({ code: 'CONSUMER_STATE' });
    expect(adapter.calls).not.toContain('start');
  });

  it("rejects with the store's error when the ping fails, and the adapter is closed once", async () => {
    const { store, pingCalled, answer } = gatedStore();
    const adapter = new RecordingAdapter();
    const consumer = consumerOn(store, adapter);
    const starting = consumer.start();
    await pingCalled;
    await consumer.stop();
    const down = new Error('connection refused');
    answer(down);
    await expect(starting).rejects.toBe(down);
    expect(adapter.calls).not.toContain('start');
    expect(
      adapter.calls.filter((call) => call === 'close'),
      'adapter.close() calls',
    ).toHaveLength(1);
  });
});
