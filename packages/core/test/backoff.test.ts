import { getEventListeners } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import type { Envelope } from '../src/index.js';
import { describeIdStrategy, pauseUnlessAborted, resolveMessageId, retryDelayMs } from '../src/index.js';

describe('retryDelayMs', () => {
  it('grows exponentially, never below the configured delay, capped at maxMs', () => {
    const config = { initialMs: 100, maxMs: 1000, jitter: 0.2 };
    expect(retryDelayMs(1, config, () => 0)).toBe(100);
    expect(retryDelayMs(2, config, () => 0)).toBe(200);
    expect(retryDelayMs(3, config, () => 0.999)).toBeLessThanOrEqual(480);
    expect(retryDelayMs(3, config, () => 0.999)).toBeGreaterThanOrEqual(400);
    expect(retryDelayMs(20, config, () => 1)).toBe(1000);
  });
});

describe('resolveMessageId', () => {
  const envelope = (patch: Partial<Envelope> = {}): Envelope => ({
    body: '{"a":1}',
    attributes: { 'message-id': 'order-1' },
    brokerMessageId: 'b-1',
    producerMessageId: 'p-1',
    source: 'q',
    raw: null,
    ...patch,
  });

  it('reads each strategy', () => {
    expect(resolveMessageId({ attribute: 'message-id' }, envelope())).toBe('order-1');
    expect(resolveMessageId('producer', envelope())).toBe('p-1');
    expect(resolveMessageId('broker', envelope())).toBe('b-1');
    expect(resolveMessageId('deduplication-id', envelope({ deduplicationId: 'd' }))).toBe('d');
    expect(resolveMessageId((e) => `fn-${e.source}`, envelope())).toBe('fn-q');
  });

  it('hashes content identically for identical bodies', () => {
    const a = resolveMessageId('content-hash', envelope());
    expect(a).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(resolveMessageId('content-hash', envelope({ body: Buffer.from('{"a":1}') }))).toBe(a);
    expect(resolveMessageId('content-hash', envelope({ body: '{"a":2}' }))).not.toBe(a);
  });

  it('treats a missing or blank ID as no ID', () => {
    expect(resolveMessageId({ attribute: 'x-id' }, envelope())).toBeUndefined();
    expect(
      resolveMessageId({ attribute: 'message-id' }, envelope({ attributes: { 'message-id': '  ' } })),
    ).toBeUndefined();
    expect(resolveMessageId('producer', envelope({ producerMessageId: undefined }))).toBeUndefined();
  });

  it('describes strategies for dead-letter reasons', () => {
    expect(describeIdStrategy({ attribute: 'message-id' })).toBe("attribute 'message-id'");
    expect(describeIdStrategy('broker')).toBe("'broker'");
  });
});

describe('pauseUnlessAborted', () => {
  it('waits its time, and leaves no listener on the signal', async () => {
    // On fake timers: "not before 30 ms" is then exact, where a real 5 ms pause on a loaded
    // machine may end after the 30 ms one.
    vi.useFakeTimers();
    try {
      const controller = new AbortController();
      let done = false;
      const pause = pauseUnlessAborted(30, controller.signal).then(() => {
        done = true;
      });
      await vi.advanceTimersByTimeAsync(29);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(true);
      await pause;
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('ends at once when the signal aborts, and resolves on a signal aborted before', async () => {
    const controller = new AbortController();
    const pause = pauseUnlessAborted(60_000, controller.signal);
    controller.abort();
    await pause;
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    await pauseUnlessAborted(60_000, controller.signal);
  });
});
