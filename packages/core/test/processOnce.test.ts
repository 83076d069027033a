import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../src/index.js';
import { ConfigError, processOnce } from '../src/index.js';

/** A store whose transaction and claim answer at once: what is left is processOnce's own work. */
function instantStore(committed = new Set<string>()) {
  return {
    transaction: (work: (tx: unknown) => Promise<unknown>) => work({}),
    claim: async (_tx: unknown, _consumer: string, ids: readonly string[]) =>
      new Set(ids.filter((id) => !committed.has(id))),
    classifyError: () => 'other',
  } as unknown as IdempotencyStore;
}

/** Microtask turns until `promise` settles (at most 50). */
async function turnsToSettle(promise: Promise<unknown>): Promise<number> {
  let settled = false;
  promise.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  for (let turn = 0; turn < 50; turn++) {
    if (settled) return turn;
    await null;
  }
  return Number.POSITIVE_INFINITY;
}

describe('processOnce', () => {
  it('settles within 4 microtask turns of an instant store: no promise layer of its own around the retry', async () => {
    // Before: an async function returning retryTransient's promise took 5 (its own promise
    // resolved with another one).
    const store = instantStore();
    expect(await turnsToSettle(processOnce(store, { consumer: 'c', messageId: 'm' }, async () => 1))).toBe(4);
    expect(
      await turnsToSettle(
        processOnce(instantStore(new Set(['m'])), { consumer: 'c', messageId: 'm' }, async () => 1),
      ),
    ).toBeLessThanOrEqual(4);
  });

  it('reports a fingerprint on a store that keeps none as a rejection, not a synchronous throw', async () => {
    let promise: Promise<unknown> | undefined;
    expect(() => {
      promise = processOnce(instantStore(), { consumer: 'c', messageId: 'm' }, async () => 1, {
        fingerprint: 'f',
      });
    }).not.toThrow();
    await expect(promise).rejects.toBeInstanceOf(ConfigError);
  });

  it('returns the work result, and duplicate for a committed marker', async () => {
    await expect(
      processOnce(instantStore(), { consumer: 'c', messageId: 'm' }, async () => 42),
    ).resolves.toEqual({
      status: 'processed',
      result: 42,
    });
    await expect(
      processOnce(instantStore(new Set(['m'])), { consumer: 'c', messageId: 'm' }, async () => 42),
    ).resolves.toEqual({ status: 'duplicate' });
  });
});
