import { EventEmitter } from 'node:events';
import type { ConsumerEvent, ConsumerEventName } from '@oncely/core';
import {
  ConsumerSpy,
  Latch,
  requireService,
  ServiceMissingError,
  WaitTimeoutError,
  waitFor,
} from '@oncely/testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';

/** Stands in for a Consumer's event surface (on/off only). */
class FakeConsumer {
  private readonly emitter = new EventEmitter();
  on(event: ConsumerEventName, listener: (event: ConsumerEvent) => void) {
    this.emitter.on(event, listener);
    return this;
  }
  off(event: ConsumerEventName, listener: (event: ConsumerEvent) => void) {
    this.emitter.off(event, listener);
    return this;
  }
  emit(event: ConsumerEventName, messageId?: string) {
    this.emitter.emit(event, { consumer: 'c', messageId });
  }
  listeners(): number {
    return this.emitter.eventNames().reduce((n, name) => n + this.emitter.listenerCount(name), 0);
  }
}

describe('ConsumerSpy', () => {
  it('records and counts events per consumer and message', () => {
    const a = new FakeConsumer();
    const b = new FakeConsumer();
    const spy = new ConsumerSpy().attach(a, 'a').attach(b, 'b');
    a.emit('received', 'm-1');
    b.emit('received', 'm-1');
    a.emit('processed', 'm-1');
    b.emit('duplicate', 'm-1');
    expect(spy.countFor('received', 'm-1')).toBe(2);
    expect(spy.count('duplicate', (e) => e.source === 'b')).toBe(1);
    expect(spy.events.map((e) => e.index)).toEqual([0, 1, 2, 3]);
    expect(spy.summary()).toBe('received=2 processed=1 duplicate=1');
    spy.detach();
    expect(a.listeners()).toBe(0);
    a.emit('received', 'm-2');
    expect(spy.count('received')).toBe(2);
  });

  it('waitFor resolves on past and future events, and times out with a descriptive error', async () => {
    const consumer = new FakeConsumer();
    const spy = new ConsumerSpy().attach(consumer);
    consumer.emit('processed', 'early');
    await expect(spy.waitFor('processed', (e) => e.event.messageId === 'early', 100)).resolves.toMatchObject({
      event: { messageId: 'early' },
    });
    const later = spy.waitForCount('processed', 3, undefined, 1000);
    consumer.emit('processed', 'x');
    consumer.emit('duplicate', 'x');
    consumer.emit('processed', 'y');
    expect((await later).map((e) => e.event.messageId)).toEqual(['early', 'x', 'y']);
    const error = await spy.waitFor('deadLettered', undefined, 30).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WaitTimeoutError);
    expect((error as Error).message).toMatch(/'deadLettered'.*0 seen/);
  });
});

describe('waitFor', () => {
  it('returns the first truthy value', async () => {
    let n = 0;
    await expect(waitFor(() => (++n >= 3 ? n : 0), { intervalMs: 1 })).resolves.toBe(3);
  });

  it('throws WaitTimeoutError naming what it waited for and the last value or error seen', async () => {
    await expect(
      waitFor(() => false, { timeoutMs: 20, intervalMs: 5, description: 'ten rows' }),
    ).rejects.toThrow(/waiting for ten rows \(last seen: false\)/);
    await expect(
      waitFor(
        () => {
          throw new Error('connection refused');
        },
        { timeoutMs: 20, intervalMs: 5 },
      ),
    ).rejects.toThrow(/connection refused/);
  });
});

describe('Latch', () => {
  it('holds waiters until opened, then lets everyone through', async () => {
    const latch = new Latch();
    let passed = 0;
    const waiting = [latch.wait(), latch.wait()].map((p) => p.then(() => passed++));
    await Promise.resolve();
    expect(passed).toBe(0);
    latch.open();
    await Promise.all(waiting);
    await latch.wait();
    expect(passed).toBe(2);
    expect(latch.isOpen).toBe(true);
  });
});

describe('requireService', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  it('is true when the probe answers', async () => {
    await expect(requireService('thing', async () => {})).resolves.toBe(true);
  });

  it('skips (false) outside CI when the probe fails or hangs', async () => {
    vi.stubEnv('CI', '');
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    await expect(requireService('thing', () => Promise.reject(new Error('down')))).resolves.toBe(false);
    await expect(requireService('thing', () => new Promise(() => {}), { timeoutMs: 20 })).resolves.toBe(
      false,
    );
    expect(warn).toHaveBeenCalledTimes(2);
  });

  it('fails in CI when the probe fails', async () => {
    vi.stubEnv('CI', 'true');
    await expect(
      requireService('PostgreSQL', () => Promise.reject(new Error('down'))),
    ).rejects.toBeInstanceOf(ServiceMissingError);
  });
});
