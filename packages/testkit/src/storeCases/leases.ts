/** Leased mode: the in-progress claim, its lease, its owner token and its completion. */
import { describe, expect, it } from 'vitest';
import { acquired, type StoreCases } from './testEnv.js';

/** The `leased mode` cases. */
export function leasedModeCases({ withStore, timeout }: StoreCases): void {
  describe('leased mode', () => {
    // Catches: a second acquire while the first claim lives (two runners of long work).
    it(
      'a live in-progress claim is busy for everyone else',
      () =>
        withStore(async (env) => {
          const key = env.key('live');
          const startedFirst = Date.now();
          const first = acquired(await env.store.acquireLease(key, 30_000));
          const firstTook = Date.now() - startedFirst;
          expect(first.takeover).toBe(false);
          expect(first.lockedUntil.getTime()).toBeGreaterThan(Date.now() + 10_000);
          const before = Date.now();
          const second = await env.store.acquireLease(key, 30_000);
          const during = Date.now() - before;
          expect(second.status).toBe('busy');
          // The busy deadline is on this process's clock (the database's time left added
          // to our now): it agrees with the claim's own deadline up to the time each call
          // took (a store may set the claim's deadline on this process's clock too, after
          // the database answered: a loaded machine's stall inside either call moves it),
          // plus a second of slack.
          if (second.status === 'busy') {
            expect(second.lockedUntil.getTime()).toBeGreaterThan(
              first.lockedUntil.getTime() - firstTook - 1_000,
            );
            expect(second.lockedUntil.getTime()).toBeLessThan(first.lockedUntil.getTime() + during + 1_000);
          }
        }),
      timeout,
    );

    // Catches: expired claims never taken over (a crashed runner blocks the message
    // forever), and stale owners that can still complete, renew or release.
    it(
      'an expired claim is taken over with a new owner; the stale owner can no longer complete',
      () =>
        withStore(async (env) => {
          const key = env.key('expiring');
          const stale = acquired(await env.store.acquireLease(key, 300));
          const fresh = await eventually(async () => {
            const claim = await env.store.acquireLease(key, 30_000);
            return claim.status === 'busy' ? undefined : claim;
          });
          const taken = acquired(fresh);
          expect(taken.takeover).toBe(true);
          expect(taken.owner).not.toBe(stale.owner);

          expect(await env.store.completeLease(key, stale.owner, { by: 'stale' })).toBe(false);
          expect(await env.store.renewLease(key, stale.owner, 30_000)).toBe(false);
          await env.store.releaseLease(key, stale.owner);
          expect((await env.store.acquireLease(key, 30_000)).status).toBe('busy');

          expect(await env.store.completeLease(key, taken.owner, { by: 'fresh' })).toBe(true);
          expect(await env.store.acquireLease(key, 30_000)).toEqual({
            status: 'completed',
            result: { by: 'fresh' },
          });
          // The owner's completion is idempotent (a retry after a lost answer succeeds)
          // and keeps the first result.
          expect(await env.store.completeLease(key, taken.owner, { by: 'again' })).toBe(true);
          expect(await env.store.acquireLease(key, 30_000)).toEqual({
            status: 'completed',
            result: { by: 'fresh' },
          });
        }),
      timeout,
    );

    // Catches: a completed claim that is handed out again (long work done twice) or
    // loses its result.
    it(
      'a completed claim returns its stored result',
      () =>
        withStore(async (env) => {
          const key = env.key('completed');
          const claim = acquired(await env.store.acquireLease(key, 30_000));
          const result = { reportId: 'r-1', pages: [1, 2, 3], note: null };
          expect(await env.store.completeLease(key, claim.owner, result)).toBe(true);
          expect(await env.store.acquireLease(key, 30_000)).toEqual({ status: 'completed', result });
          const bare = acquired(await env.store.acquireLease(env.key('no-result'), 30_000));
          expect(await env.store.completeLease(env.key('no-result'), bare.owner, undefined)).toBe(true);
          expect(await env.store.acquireLease(env.key('no-result'), 30_000)).toEqual({
            status: 'completed',
            result: null,
          });
        }),
      timeout,
    );

    // Catches: a release that leaves the claim (the retry waits for the deadline) and
    // renewals that do not move the deadline.
    it(
      'release hands the claim to the next delivery; renew extends it',
      () =>
        withStore(async (env) => {
          const key = env.key('released');
          const first = acquired(await env.store.acquireLease(key, 30_000));
          await env.store.releaseLease(key, first.owner);
          const second = acquired(await env.store.acquireLease(key, 400));
          expect(second.takeover).toBe(false);
          expect(await env.store.renewLease(key, second.owner, 30_000)).toBe(true);
          const busy = await env.store.acquireLease(key, 30_000);
          expect(busy.status).toBe('busy');
          if (busy.status === 'busy') {
            expect(busy.lockedUntil.getTime()).toBeGreaterThan(second.lockedUntil.getTime() + 10_000);
          }
        }),
      timeout,
    );
  });
}

/** Polls `probe` until it returns a value, failing after `timeoutMs`. */
async function eventually<T>(probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
