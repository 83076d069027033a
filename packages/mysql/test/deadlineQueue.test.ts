import { describe, expect, it } from 'vitest';
import { DeadlineQueue } from '../src/drivers/DeadlineQueue.js';

describe('DeadlineQueue: one shared timer for waits of one length', () => {
  it('expires a wait after its length, never one removed in time, and serves waits added later on the same timer', async () => {
    const queue = new DeadlineQueue(40);
    const expired: string[] = [];
    const started = performance.now();
    const removed = queue.add(() => expired.push('removed'));
    const first = new Promise<number>((resolve) => queue.add(() => resolve(performance.now() - started)));
    queue.remove(removed);
    const waited = await first;
    expect(waited).toBeGreaterThanOrEqual(39);
    // A wait added after the timer fired arms it again and expires in its turn.
    const later = performance.now();
    const second = await new Promise<number>((resolve) =>
      queue.add(() => resolve(performance.now() - later)),
    );
    expect(second).toBeGreaterThanOrEqual(39);
    expect(expired).toEqual([]);
  });

  it('a wait added while the timer is armed for an older one expires at its own deadline, not the older one', async () => {
    const queue = new DeadlineQueue(60);
    const older = queue.add(() => {});
    await new Promise((resolve) => setTimeout(resolve, 30));
    const added = performance.now();
    const waited = await new Promise<number>((resolve) =>
      queue.add(() => resolve(performance.now() - added)),
    );
    queue.remove(older);
    expect(waited).toBeGreaterThanOrEqual(59);
  });

  it('a wait added by an expiring one is still bounded', async () => {
    const queue = new DeadlineQueue(20);
    const chained = await new Promise<string>((resolve) =>
      queue.add(() => queue.add(() => resolve('chained'))),
    );
    expect(chained).toBe('chained');
  });
});
