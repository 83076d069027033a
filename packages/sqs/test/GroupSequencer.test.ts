import { LeaseLostError, silentLogger } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { GroupSequencer, type SequencedDelivery, type Settlement } from '../src/GroupSequencer.js';

// Unit test of the per-group sequencing logic with plain in-memory deliveries (no SDK,
// no broker). fauxqs hands out one in-flight message per FIFO group, so the path where
// SQS returns several messages of one group in a single receive — the path that needs
// this sequencer — cannot be reached on the emulator; it is exercised here, and on the
// memory broker's conformance run.

class FakeDelivery implements SequencedDelivery {
  settlement: Settlement | undefined;
  leaseExpiresAt: number;
  extensions = 0;
  released = false;
  lose = false;
  constructor(
    readonly name: string,
    readonly orderingKey: string | undefined,
    leaseMs = 10_000,
  ) {
    this.leaseExpiresAt = Date.now() + leaseMs;
  }
  async extendLease(ms: number): Promise<void> {
    if (this.lose) throw new LeaseLostError('gone');
    this.extensions++;
    this.leaseExpiresAt = Date.now() + ms;
  }
  async release(): Promise<void> {
    this.settlement = 'release';
    this.released = true;
  }
}

/** Polls until `condition` holds (deadline 2 s): waits on state, not on time. */
async function until(condition: () => boolean, what = 'condition'): Promise<void> {
  const deadline = Date.now() + 2000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function harness(settle: (d: FakeDelivery) => Settlement | undefined, extendByMs = 1000) {
  const log: string[] = [];
  const done: string[] = [];
  let running = 0;
  let maxRunningPerGroup = new Map<string, number>();
  const perGroup = new Map<string, number>();
  const gates = new Map<string, () => void>();
  const sequencer = new GroupSequencer<FakeDelivery>({
    log: silentLogger,
    extendByMs: () => extendByMs,
    onDone: (d) => done.push(d.name),
    dispatch: async (d) => {
      running++;
      const key = d.orderingKey ?? '-';
      perGroup.set(key, (perGroup.get(key) ?? 0) + 1);
      maxRunningPerGroup.set(key, Math.max(maxRunningPerGroup.get(key) ?? 0, perGroup.get(key)!));
      log.push(`start ${d.name}`);
      await new Promise<void>((resolve) => gates.set(d.name, resolve));
      d.settlement = settle(d);
      log.push(`end ${d.name}`);
      perGroup.set(key, perGroup.get(key)! - 1);
      running--;
    },
  });
  const finish = async (name: string) => {
    await until(() => gates.has(name), `${name} started`).catch(() => {});
    const gate = gates.get(name);
    if (!gate) throw new Error(`${name} never started; log: ${log.join(', ')}`);
    gates.delete(name);
    gate();
    await until(() => done.includes(name), `${name} done`);
  };
  return {
    sequencer,
    log,
    done,
    finish,
    started: (name: string) => log.includes(`start ${name}`),
    maxRunningPerGroup: () => maxRunningPerGroup,
    reset: () => {
      maxRunningPerGroup = new Map();
    },
    running: () => running,
  };
}

describe('GroupSequencer', () => {
  it('runs one message per group at a time, in order, and groups in parallel', async () => {
    const h = harness(() => 'ack');
    const a = ['a1', 'a2', 'a3'].map((n) => new FakeDelivery(n, 'A'));
    const b = ['b1', 'b2'].map((n) => new FakeDelivery(n, 'B'));
    for (const d of [a[0]!, b[0]!, a[1]!, a[2]!, b[1]!]) h.sequencer.submit(d);
    await until(() => h.started('a1') && h.started('b1'));
    // Both groups started their first message; nothing else of group A yet.
    expect(h.started('a1') && h.started('b1')).toBe(true);
    expect(h.started('a2')).toBe(false);
    expect(h.sequencer.waitingCount).toBe(3);
    await h.finish('a1');
    await until(() => h.started('a2'), 'a2 started');
    await h.finish('b1');
    await h.finish('a2');
    await h.finish('b2');
    await h.finish('a3');
    const order = h.log.filter((l) => l.startsWith('start')).map((l) => l.slice(6));
    expect(order.filter((n) => n.startsWith('a'))).toEqual(['a1', 'a2', 'a3']);
    expect(order.filter((n) => n.startsWith('b'))).toEqual(['b1', 'b2']);
    expect(h.maxRunningPerGroup().get('A')).toBe(1);
    expect(h.done.sort()).toEqual(['a1', 'a2', 'a3', 'b1', 'b2']);
  });

  it('messages without a group run at once, in parallel', async () => {
    const h = harness(() => 'ack');
    const ds = ['s1', 's2', 's3'].map((n) => new FakeDelivery(n, undefined));
    for (const d of ds) h.sequencer.submit(d);
    await until(() => h.running() === 3, 'three running');
    expect(h.running()).toBe(3);
    for (const d of ds) await h.finish(d.name);
    expect(h.done.length).toBe(3);
  });

  it('releases the messages behind one that is retried, so they cannot overtake it', async () => {
    const h = harness((d) => (d.name === 'a1' ? 'retry' : 'ack'));
    const ds = ['a1', 'a2', 'a3'].map((n) => new FakeDelivery(n, 'A'));
    for (const d of ds) h.sequencer.submit(d);
    await h.finish('a1');
    await until(() => h.done.length === 3, 'all three done');
    expect(h.started('a2')).toBe(false);
    expect(ds[1]!.released && ds[2]!.released).toBe(true);
    expect(h.done.sort()).toEqual(['a1', 'a2', 'a3']);
    // The group is free again: a redelivered a1 starts at once.
    const again = new FakeDelivery('a1-again', 'A');
    h.sequencer.submit(again);
    await until(() => h.started('a1-again'), 'a1-again started');
    await h.finish('a1-again');
  });

  it('continues after a dead-lettered message (it is finished, in order)', async () => {
    const h = harness((d) => (d.name === 'a1' ? 'dead-letter' : 'ack'));
    const ds = ['a1', 'a2'].map((n) => new FakeDelivery(n, 'A'));
    for (const d of ds) h.sequencer.submit(d);
    await h.finish('a1');
    await until(() => h.started('a2'), 'a2 started');
    await h.finish('a2');
  });

  it('keeps waiting messages visible with a heartbeat, and refreshes before running one that waited', async () => {
    const h = harness(() => 'ack', 400);
    const ds = ['a1', 'a2'].map((n) => new FakeDelivery(n, 'A', 400));
    for (const d of ds) h.sequencer.submit(d);
    // Heartbeat every 200 ms while a2 waits: its original 400 ms lease would have run out.
    const deadline = ds[1]!.leaseExpiresAt;
    await until(
      () => Date.now() > deadline + 100 && ds[1]!.extensions >= 2,
      'two heartbeats past the first lease',
    );
    expect(ds[1]!.extensions).toBeGreaterThanOrEqual(2);
    expect(ds[1]!.leaseExpiresAt).toBeGreaterThan(Date.now());
    await h.finish('a1');
    await h.finish('a2');
  });

  it('drops a waiting message whose lease is lost and releases those behind it', async () => {
    const h = harness(() => 'ack', 300);
    const ds = ['a1', 'a2', 'a3'].map((n) => new FakeDelivery(n, 'A', 300));
    ds[1]!.lose = true;
    for (const d of ds) h.sequencer.submit(d);
    await until(() => ds[2]!.released, 'a3 released');
    await until(() => h.done.length === 2, 'a2 and a3 done');
    expect(h.done.sort()).toEqual(['a2', 'a3']);
    await h.finish('a1');
    expect(h.started('a2') || h.started('a3')).toBe(false);
    expect(h.sequencer.waitingCount).toBe(0);
  });

  it('on stop releases every waiting message at once and runs nothing more', async () => {
    const h = harness(() => 'ack');
    const ds = ['a1', 'a2', 'a3'].map((n) => new FakeDelivery(n, 'A'));
    for (const d of ds) h.sequencer.submit(d);
    await until(() => h.started('a1'), 'a1 started');
    await h.sequencer.releaseWaiting();
    expect(ds[1]!.released && ds[2]!.released).toBe(true);
    await h.finish('a1');
    await until(() => h.done.length === 3, 'all three done');
    expect(h.started('a2')).toBe(false);
    expect(h.done.sort()).toEqual(['a1', 'a2', 'a3']);
  });
});
