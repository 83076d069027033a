import type { AdapterRuntime, BrokerAdapter, Delivery } from '@oncely/core';
import { FaultInjector } from '@oncely/testkit';
import { describe, expect, it } from 'vitest';

/** Records what reached the "broker" through each delivery. */
function fakeDelivery(id: string, calls: string[], renewable: boolean): Delivery {
  const delivery: Delivery = {
    envelope: { body: '{}', attributes: { 'message-id': id }, source: 'q', raw: null },
    ack: async () => void calls.push(`ack:${id}`),
    retryLater: async (ms) => void calls.push(`retry:${id}:${ms}`),
    deadLetter: async (reason) => void calls.push(`dead:${id}:${reason}`),
    release: async () => void calls.push(`release:${id}`),
  };
  if (renewable) delivery.extendLease = async (ms) => void calls.push(`extend:${id}:${ms}`);
  return delivery;
}

/** An adapter that dispatches the given deliveries once started (no broker: a unit test of the wrapper). */
function fakeAdapter(deliveries: Delivery[]): BrokerAdapter {
  return {
    type: 'memory',
    defaultIdStrategy: { attribute: 'message-id' },
    lease: { extendByMs: 1000 },
    async start(runtime) {
      for (const delivery of deliveries) void runtime.dispatch(delivery);
    },
    async stop() {},
    async close() {},
  };
}

function runtimeThat(
  settle: (delivery: Delivery) => Promise<void>,
): AdapterRuntime & { settled: Promise<void>[] } {
  const settled: Promise<void>[] = [];
  return {
    consumerName: 'c',
    concurrency: 1,
    mode: 'transactional',
    stopping: new AbortController().signal,
    log: { debug() {}, info() {}, warn() {}, error() {} },
    store: {} as never,
    whenReady: async () => 1,
    reportError() {},
    dispatch: (delivery) => {
      const done = settle(delivery);
      settled.push(done);
      return done;
    },
    settled,
  };
}

describe('FaultInjector', () => {
  it('drops the planned acks (the core sees success, the broker nothing) and records every settlement', async () => {
    const calls: string[] = [];
    const faults = new FaultInjector();
    faults.dropAck(['a']);
    const adapter = faults.wrap(
      fakeAdapter([fakeDelivery('a', calls, false), fakeDelivery('b', calls, false)]),
      {
        label: 'x',
      },
    );
    const runtime = runtimeThat((d) => d.ack());
    await adapter.start(runtime);
    await Promise.all(runtime.settled);
    expect(calls).toEqual(['ack:b']);
    expect(faults.list('ack', { messageId: 'a' })).toMatchObject([{ dropped: true, ok: false, source: 'x' }]);
    expect(faults.confirmedAcks('b')).toBe(1);
    expect(faults.dispatches.map((d) => d.messageId)).toEqual(['a', 'b']);
  });

  it('holds a settlement until released and tells when it is reached', async () => {
    const calls: string[] = [];
    const faults = new FaultInjector();
    let reached = 0;
    const held = faults.hold('retryLater', 'a', () => reached++);
    const adapter = faults.wrap(fakeAdapter([fakeDelivery('a', calls, false)]), { label: 'x' });
    const runtime = runtimeThat((d) => d.retryLater(250));
    await adapter.start(runtime);
    await held.reached;
    expect(reached).toBe(1);
    expect(calls).toEqual([]);
    held.release();
    await Promise.all(runtime.settled);
    expect(calls).toEqual(['retry:a:250']);
    expect(faults.list('retryLater')).toMatchObject([{ ok: true, delayMs: 250 }]);
  });

  it('keeps extendLease absent when the broker has none, and forwards it when it has', async () => {
    const calls: string[] = [];
    const faults = new FaultInjector();
    const seen: Delivery[] = [];
    const adapter = faults.wrap(
      fakeAdapter([fakeDelivery('a', calls, false), fakeDelivery('b', calls, true)]),
      {
        label: 'x',
      },
    );
    const runtime = runtimeThat(async (d) => void seen.push(d));
    await adapter.start(runtime);
    await Promise.all(runtime.settled);
    expect(seen[0]!.extendLease).toBeUndefined();
    await seen[1]!.extendLease!(500);
    expect(calls).toEqual(['extend:b:500']);
    expect(adapter.lease).toEqual({ extendByMs: 1000 });
  });

  it('records a failed settlement and rethrows it to the core', async () => {
    const faults = new FaultInjector();
    const failing: Delivery = {
      ...fakeDelivery('a', [], false),
      ack: async () => {
        throw new Error('stale receipt');
      },
    };
    const adapter = faults.wrap(fakeAdapter([failing]), { label: 'x' });
    const runtime = runtimeThat((d) => d.ack().catch(() => {}));
    await adapter.start(runtime);
    await Promise.all(runtime.settled);
    expect(faults.list('ack', { messageId: 'a' })).toMatchObject([{ ok: false, dropped: false }]);
    expect((faults.settlements[0]!.error as Error).message).toBe('stale receipt');
  });
});
