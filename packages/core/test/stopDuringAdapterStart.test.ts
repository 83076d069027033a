/**
 * A stop() called while the adapter's own start() is still running (connecting, declaring,
 * joining its group), after the store check. Before the fix stop() went on at once: it
 * stopped and closed the adapter under its start, which then finished after stop() had
 * resolved and left what it built (a consumer, a subscription, a socket) running. Now
 * stop() waits for that start to settle (within `stopTimeoutMs`) and stops what it
 * started; a start still running past that bound is stopped and closed again once it
 * ends. An adapter that was never started (stop() during the store check) is closed,
 * never stopped.
 */
import { describe, expect, it } from 'vitest';
import type {
  AdapterRuntime,
  BrokerAdapter,
  IdempotencyStore,
  Logger,
  TypedBrokerConfig,
} from '../src/index.js';
import { Consumer, silentLogger } from '../src/index.js';

const store = {
  transaction: async () => {
    throw new Error('not reached: no delivery in this test');
  },
  claim: async () => new Set<string>(),
  classifyError: () => 'other',
  ping: async () => {},
} as unknown as IdempotencyStore;

/**
 * An adapter whose start() runs until the test lets it finish, recording the calls it gets
 * and what was "open" (its start built it, its close ended it) at each.
 */
class SlowStartAdapter implements BrokerAdapter {
  readonly type = 'slow-start';
  readonly defaultIdStrategy = { attribute: 'message-id' } as const;
  readonly calls: string[] = [];
  /** True from the end of start() to the close that follows it: a live receiver. */
  open = false;
  private finish!: (error?: Error) => void;
  readonly startCalled: Promise<void>;
  private called!: () => void;

  constructor() {
    this.startCalled = new Promise((resolve) => {
      this.called = resolve;
    });
  }

  start(_runtime: AdapterRuntime): Promise<void> {
    this.calls.push('start');
    this.called();
    return new Promise<void>((resolve, reject) => {
      this.finish = (error) => {
        if (error) return reject(error);
        // What a real adapter does at the end of its start: it consumes from now on.
        this.open = true;
        this.calls.push('started');
        resolve();
      };
    });
  }

  /** Lets the start finish (or fail with `error`). */
  letStartFinish(error?: Error): void {
    this.finish(error);
  }

  async stop(): Promise<void> {
    this.calls.push('stop');
  }

  async close(): Promise<void> {
    this.calls.push('close');
    this.open = false;
  }
}

function consumerOn(adapter: BrokerAdapter, options: { stopTimeoutMs?: number; logger?: Logger } = {}) {
  return new Consumer(
    {
      name: 'slow-start',
      broker: { type: 'memory' } as TypedBrokerConfig,
      store,
      handler: async () => {},
      logger: options.logger ?? silentLogger,
      ...(options.stopTimeoutMs !== undefined ? { stopTimeoutMs: options.stopTimeoutMs } : {}),
    },
    adapter,
  );
}

describe("stop() while the adapter's start() runs", () => {
  it('waits for the start to finish, then stops and closes what it started', async () => {
    const adapter = new SlowStartAdapter();
    const consumer = consumerOn(adapter);
    const starting = consumer.start();
    await adapter.startCalled;
    let stopped = false;
    const stopping = consumer.stop().then(() => {
      stopped = true;
    });
    // The adapter is still connecting: nothing may be stopped or closed under it.
    await new Promise((resolve) => setImmediate(resolve));
    expect(adapter.calls, 'adapter calls while its start runs').toEqual(['start']);
    expect(stopped, 'stop() resolved while the adapter was still starting').toBe(false);
    adapter.letStartFinish();
    await stopping;
    await expect(starting, 'start() overtaken by stop() is no error').resolves.toBeUndefined();
    expect(adapter.calls).toEqual(['start', 'started', 'stop', 'close']);
    expect(adapter.open, 'the adapter left open after stop() resolved').toBe(false);
  });

  it('rejects start() with the adapter error and closes the adapter once when its start fails', async () => {
    const adapter = new SlowStartAdapter();
    const consumer = consumerOn(adapter);
    const starting = consumer.start();
    await adapter.startCalled;
    const stopping = consumer.stop();
    const refused = new Error('ECONNREFUSED');
    adapter.letStartFinish(refused);
    await stopping;
    await expect(starting).rejects.toMatchObject({ cause: refused });
    expect(
      adapter.calls.filter((call) => call === 'close'),
      'adapter.close() calls',
    ).toHaveLength(1);
    expect(adapter.calls, 'a failed start has nothing to stop').not.toContain('stop');
  });

  it('is bounded by stopTimeoutMs: a start that outlives it is stopped and closed again once it ends', async () => {
    const adapter = new SlowStartAdapter();
    const warnings: string[] = [];
    const logger: Logger = { ...silentLogger, warn: (message) => void warnings.push(message) };
    const consumer = consumerOn(adapter, { stopTimeoutMs: 50, logger });
    const starting = consumer.start();
    await adapter.startCalled;
    await consumer.stop();
    expect(adapter.calls, 'stop() gave up waiting and closed the adapter').toEqual([
      'start',
      'stop',
      'close',
    ]);
    expect(warnings.join('\n')).toMatch(/start/);
    // The start ends after stop() returned: what it built must not stay open.
    adapter.letStartFinish();
    await expect(starting).resolves.toBeUndefined();
    expect(adapter.calls).toEqual(['start', 'stop', 'close', 'started', 'stop', 'close']);
    expect(adapter.open, 'the adapter left open after its late start').toBe(false);
  });

  it('closes an adapter it never started, without stopping it', async () => {
    let answer!: () => void;
    let pinged!: () => void;
    const pingCalled = new Promise<void>((resolve) => {
      pinged = resolve;
    });
    const gated = {
      ...store,
      ping: () => {
        pinged();
        return new Promise<void>((resolve) => {
          answer = resolve;
        });
      },
    } as unknown as IdempotencyStore;
    const adapter = new SlowStartAdapter();
    const consumer = new Consumer(
      {
        name: 'never-started',
        broker: { type: 'memory' } as TypedBrokerConfig,
        store: gated,
        handler: async () => {},
        logger: silentLogger,
      },
      adapter,
    );
    const starting = consumer.start();
    await pingCalled;
    await consumer.stop();
    answer();
    await expect(starting).resolves.toBeUndefined();
    expect(adapter.calls, 'calls on an adapter that was never started').toEqual(['close']);
  });
});
