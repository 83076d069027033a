import { describe, expect, it, vi } from 'vitest';
import type { Delivery } from '../src/index.js';
import { HandlerTimeoutError, LeaseKeeper, LeaseLostError } from '../src/index.js';

/** A delivery whose lease is a timestamp we can inspect. */
function leasedDelivery(extend: (ms: number) => Promise<void>): Delivery {
  return {
    envelope: { body: null, attributes: {}, source: 'q', raw: null },
    ack: async () => {},
    retryLater: async () => {},
    deadLetter: async () => {},
    release: async () => {},
    extendLease: extend,
  };
}

function keeper(delivery: Delivery, patch: Partial<ConstructorParameters<typeof LeaseKeeper>[0]> = {}) {
  const events: string[] = [];
  const k = new LeaseKeeper({
    delivery,
    brokerLease: { extendByMs: 100 },
    renewBroker: true,
    handlerTimeoutMs: 10_000,
    onRenewed: () => events.push('renewed'),
    onLost: (e) => events.push(`lost:${e.name}`),
    onRenewError: () => events.push('renew-error'),
    ...patch,
  });
  return { k, events };
}

const until = async (condition: () => boolean, ms = 2000) => {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('LeaseKeeper', () => {
  it('hands a signal asked for only after the abort already aborted, with the reason; one asked for before aborts later', () => {
    const late = keeper(leasedDelivery(async () => {})).k;
    late.abort(new HandlerTimeoutError('too slow'));
    expect(late.aborted).toBe(true);
    expect(late.reason).toBeInstanceOf(HandlerTimeoutError);
    expect(late.signal.aborted).toBe(true);
    expect(late.signal.reason).toBeInstanceOf(HandlerTimeoutError);

    const early = keeper(leasedDelivery(async () => {})).k;
    const signal = early.signal;
    const seen: unknown[] = [];
    signal.addEventListener('abort', () => seen.push(signal.reason));
    expect(early.aborted).toBe(false);
    early.abort(new LeaseLostError('gone'));
    // The first reason stands.
    early.abort(new HandlerTimeoutError('too slow'));
    expect(seen).toHaveLength(1);
    expect(seen[0]).toBeInstanceOf(LeaseLostError);
    expect(early.signal).toBe(signal);
    expect(early.reason).toBeInstanceOf(LeaseLostError);
  });

  it('renews before the lease runs out, by extendByMs each time', async () => {
    const extensions: number[] = [];
    const { k, events } = keeper(leasedDelivery(async (ms) => void extensions.push(ms)));
    k.start();
    await until(() => extensions.length >= 3);
    k.stop();
    expect(extensions.every((ms) => ms === 100)).toBe(true);
    expect(events.filter((e) => e === 'renewed').length).toBeGreaterThanOrEqual(3);
    expect(k.signal.aborted).toBe(false);
  });

  it('aborts the signal when the broker says the lease is lost', async () => {
    const { k, events } = keeper(
      leasedDelivery(async () => {
        throw new LeaseLostError('gone');
      }),
    );
    k.start();
    await until(() => k.signal.aborted);
    expect(k.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(events).toContain('lost:LeaseLostError');
  });

  it('never extends past the broker maximum measured from receipt', async () => {
    // On fake timers: with real ones a tick ~80 ms late (a loaded machine) skipped the
    // shrinking extensions this test is about, and the last one was a full 100.
    vi.useFakeTimers();
    try {
      const extensions: number[] = [];
      const { k } = keeper(
        leasedDelivery(async (ms) => void extensions.push(ms)),
        {
          brokerLease: { extendByMs: 100, maxTotalMs: 180 },
        },
      );
      k.start();
      await vi.advanceTimersByTimeAsync(1000);
      expect(k.signal.aborted).toBe(true);
      // Ticks every 50 ms: 100 at 50, 80 at 100, 30 at 150 (each shrinks to the cap counted
      // from receipt); at 160, a margin before that last lease ends, it is given up.
      expect(extensions).toEqual([100, 80, 30]);
      expect(k.signal.reason).toBeInstanceOf(LeaseLostError);
    } finally {
      vi.useRealTimers();
    }
  });

  it('aborts the signal when renewal stops at the cap, on a timer, while the last lease still holds', async () => {
    // Renewal stopped at the cap, but the keeper only noticed at its next tick: up to half
    // a lease after the message had gone back to the broker, the handler still ran with a
    // live signal.
    vi.useFakeTimers();
    try {
      const extensions: number[] = [];
      const { k, events } = keeper(
        leasedDelivery(async (ms) => void extensions.push(ms)),
        { brokerLease: { extendByMs: 100, maxTotalMs: 180 } },
      );
      k.start();
      // Renewed at 50, 100 and 150; the last renewal reaches the cap: the lease ends at 180.
      await vi.advanceTimersByTimeAsync(159);
      expect(extensions).toEqual([100, 80, 30]);
      expect(k.signal.aborted).toBe(false);
      // A margin (20 ms) before the lease ends, so the handler can stop while it holds it.
      await vi.advanceTimersByTimeAsync(2);
      expect(k.signal.aborted).toBe(true);
      expect(k.signal.reason).toBeInstanceOf(LeaseLostError);
      expect(events.filter((e) => e.startsWith('lost'))).toEqual(['lost:LeaseLostError']);
      await vi.advanceTimersByTimeAsync(1000);
      expect(extensions).toEqual([100, 80, 30]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('keeps retrying transient renewal errors while the lease can still be alive, then gives up', async () => {
    let calls = 0;
    const { k, events } = keeper(
      leasedDelivery(async () => {
        calls++;
        throw new Error('ECONNRESET');
      }),
    );
    k.start();
    await until(() => k.signal.aborted);
    expect(calls).toBeGreaterThanOrEqual(1);
    expect(events).toContain('renew-error');
    expect(k.signal.reason).toBeInstanceOf(LeaseLostError);
  });

  it('aborts with HandlerTimeoutError when the handler clock runs out', async () => {
    const { k } = keeper(
      leasedDelivery(async () => {}),
      { handlerTimeoutMs: 30 },
    );
    k.start();
    k.startHandlerClock();
    await until(() => k.signal.aborted);
    k.stop();
    expect(k.signal.reason).toBeInstanceOf(HandlerTimeoutError);
  });

  it('renews the leased-mode claim on the same timer and aborts when it was taken over', async () => {
    let renewals = 0;
    const { k } = keeper(
      leasedDelivery(async () => {}),
      {
        claimMs: 60,
        renewClaim: async () => ++renewals < 3,
      },
    );
    k.start();
    await until(() => k.signal.aborted);
    expect(renewals).toBe(3);
    expect(k.signal.reason).toBeInstanceOf(LeaseLostError);
  });

  it('does nothing once stopped', async () => {
    // On fake timers: twenty renewal intervals (50 ms) and the handler timeout (10 s) run
    // for certain, where a 150 ms real pause on a loaded machine could end before the
    // first renewal was even due.
    vi.useFakeTimers();
    try {
      let calls = 0;
      const { k } = keeper(leasedDelivery(async () => void calls++));
      k.start();
      k.stop();
      await vi.advanceTimersByTimeAsync(20_000);
      expect(calls).toBe(0);
      expect(k.signal.aborted).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('LeaseKeeper with Delivery.lost', () => {
  it('aborts the signal as soon as the adapter reports the delivery lost, without polling', async () => {
    const lost = new AbortController();
    const delivery = { ...leasedDelivery(async () => {}), extendLease: undefined, lost: lost.signal };
    const { k, events } = keeper(delivery, { brokerLease: undefined });
    k.start();
    expect(k.signal.aborted).toBe(false);
    lost.abort(new Error('channel closed'));
    expect(k.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(events).toEqual(['lost:LeaseLostError']);
  });

  it('ignores a loss reported after the settlement', () => {
    const lost = new AbortController();
    const { k, events } = keeper({ ...leasedDelivery(async () => {}), lost: lost.signal });
    k.start();
    k.stop();
    lost.abort();
    expect(k.signal.aborted).toBe(false);
    expect(events).toEqual([]);
  });
});

describe('LeaseKeeper listeners', () => {
  it('removes its listener from a shared lost signal when stopped (one channel serves many deliveries)', () => {
    const channel = new AbortController();
    let listeners = 0;
    const signal = channel.signal;
    const add = signal.addEventListener.bind(signal);
    const remove = signal.removeEventListener.bind(signal);
    signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listeners++;
      add(...args);
    }) as typeof signal.addEventListener;
    signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listeners--;
      remove(...args);
    }) as typeof signal.removeEventListener;
    for (let i = 0; i < 50; i++) {
      const { k } = keeper({ ...leasedDelivery(async () => {}), lost: signal });
      k.start();
      k.stop();
    }
    expect(listeners).toBe(0);
  });
});
