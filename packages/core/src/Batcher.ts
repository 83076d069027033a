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
  /** Set by drain(): no more items are coming to fill a batch, so none waits for them. */
  private draining = false;

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
      // Draining, the items added in the same turn still share a batch.
      else this.timer ??= setTimeout(() => this.flush(), this.draining ? 0 : this.maxWaitMs);
    });
  }

  /**
   * On stop: runs what is pending now and, from then on, every item without waiting for
   * a batch to fill. Items still being prepared when the consumer stops join later; they
   * must not wait `maxWaitMs` (the consumer's stop would wait for them, or give up on them).
   */
  drain(): void {
    this.draining = true;
    this.flush();
  }

  /** Runs what is pending now. */
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

/**
 * Gathers a known set of ordered deliveries (`count` of them, by index) into one batch:
 * it runs once each index was added or skipped (settled before it could join), with the
 * items in index order, whatever order they arrive in. An index skipped as `holdsBack`
 * (it will come again: retried, released) cuts the batch there: the items after it are
 * handed to `run` as `heldBack`, to be given back rather than run ahead of it. `add`
 * resolves once the batch has run.
 *
 * @example
 * ```ts
 * const gathering = new Gathering(2, async (items, heldBack) => { await processAll(items); }, console.error);
 * gathering.skip(0, false);
 * await gathering.add(1, item);
 * ```
 */
export class Gathering<T> {
  private readonly items: Array<T | undefined>;
  private readonly arrived = new Set<number>();
  private readonly waiting: Array<() => void> = [];
  /** The first index skipped as holding back the ones after it (`count`: none). */
  private cut: number;

  constructor(
    private readonly count: number,
    private readonly run: (items: T[], heldBack: T[]) => Promise<void>,
    private readonly onError: (error: unknown) => void,
  ) {
    this.items = new Array<T | undefined>(count);
    this.cut = count;
  }

  add(index: number, item: T): Promise<void> {
    return new Promise((done) => {
      this.items[index] = item;
      this.waiting.push(done);
      this.arrive(index);
    });
  }

  /**
   * Index `index` will not join (already settled); a no-op once it was added.
   * `holdsBack`: it was not done (it comes again), so the items after it must wait for it.
   */
  skip(index: number, holdsBack: boolean): void {
    if (this.arrived.has(index)) return;
    if (holdsBack) this.cut = Math.min(this.cut, index);
    this.arrive(index);
  }

  private arrive(index: number): void {
    this.arrived.add(index);
    if (this.arrived.size < this.count) return;
    const present = (item: T | undefined): item is T => item !== undefined;
    const batch = this.items.slice(0, this.cut).filter(present);
    const heldBack = this.items.slice(this.cut + 1).filter(present);
    const run = batch.length + heldBack.length === 0 ? Promise.resolve() : this.run(batch, heldBack);
    run.catch(this.onError).finally(() => {
      for (const done of this.waiting.splice(0)) done();
    });
  }
}
