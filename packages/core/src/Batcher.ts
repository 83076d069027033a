/**
 * Collects items into batches: a batch runs when it reaches `size` or `maxWaitMs` after
 * its first item, whichever comes first. `add` resolves once the item's batch has run.
 *
 * @example
 * ```ts
 * const batcher = new Batcher(50, 20, async (items) => { await processAll(items); });
 * await batcher.add(item);
 * ```
 */
export class Batcher<T> {
  private pending: Array<{ item: T; done: () => void }> = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly size: number,
    private readonly maxWaitMs: number,
    private readonly run: (items: T[]) => Promise<void>,
    private readonly onError: (error: unknown) => void,
  ) {}

  add(item: T): Promise<void> {
    return new Promise((done) => {
      this.pending.push({ item, done });
      if (this.pending.length >= this.size) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.maxWaitMs);
    });
  }

  /** Runs what is pending now (on stop, so nothing waits for a timer). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending.splice(0);
    if (batch.length === 0) return;
    this.run(batch.map((entry) => entry.item))
      .catch(this.onError)
      .finally(() => {
        for (const entry of batch) entry.done();
      });
  }
}
