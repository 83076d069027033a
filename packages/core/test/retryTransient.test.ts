import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../src/index.js';
import { MAX_TRANSIENT_RETRIES, retryTransient } from '../src/index.js';

/** A store whose classifyError calls an error transient when it says so. */
const store = {
  classifyError: (error: unknown) => ((error as { transient?: boolean }).transient ? 'transient' : 'other'),
} as unknown as IdempotencyStore;

const transient = () => Object.assign(new Error('serialization failure'), { transient: true });

describe('retryTransient', () => {
  it('returns the first attempt that succeeds after transient failures', async () => {
    let calls = 0;
    const value = await retryTransient(store, async () => {
      if (++calls < 3) throw transient();
      return 'done';
    });
    expect(value).toBe('done');
    expect(calls).toBe(3);
  });

  it(`gives up after ${MAX_TRANSIENT_RETRIES} retries with the last transient error`, async () => {
    let calls = 0;
    await expect(
      retryTransient(store, async () => {
        calls++;
        throw transient();
      }),
    ).rejects.toMatchObject({ transient: true });
    expect(calls).toBe(MAX_TRANSIENT_RETRIES + 1);
  });

  it('rethrows any other error at once, also one thrown before the attempt returns a promise', async () => {
    let calls = 0;
    const other = new Error('constraint');
    await expect(
      retryTransient(store, async () => {
        calls++;
        throw other;
      }),
    ).rejects.toBe(other);
    expect(calls).toBe(1);
    await expect(
      retryTransient(store, () => {
        throw other;
      }),
    ).rejects.toBe(other);
  });

  it('retries an attempt that throws a transient error synchronously', async () => {
    let calls = 0;
    const value = await retryTransient(store, () => {
      if (++calls === 1) throw transient();
      return Promise.resolve(calls);
    });
    expect(value).toBe(2);
  });
});
