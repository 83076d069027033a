/**
 * A one-shot gate: everyone awaiting `wait()` is held until `open()`; once open it stays
 * open. Scenarios hold handlers and settlements on latches instead of sleeping.
 *
 * @example
 * ```ts
 * const release = new Latch();
 * const handler = async () => { await release.wait(); };
 * // ... once the test has seen what it needs:
 * release.open();
 * ```
 */
export class Latch {
  private opened = false;
  private readonly waiting: Array<() => void> = [];

  /** True once `open()` was called. */
  get isOpen(): boolean {
    return this.opened;
  }

  /** Resolves once the latch is open (at once if it already is). */
  wait(): Promise<void> {
    if (this.opened) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Opens the latch for every current and future waiter. */
  open(): void {
    this.opened = true;
    for (const resolve of this.waiting.splice(0)) resolve();
  }
}
