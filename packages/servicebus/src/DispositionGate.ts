/**
 * Keeps settlements with different outcomes on one receiver out of the same disposition
 * frame.
 *
 * rhea 3.0.5 (under `@azure/service-bus`) writes the dispositions settled in one pass as
 * ranges of consecutive delivery ids, and its check that a range shares one outcome skips
 * the second delivery of a run: a dead-letter settled in the same tick as the complete of
 * the delivery before it goes out as a complete (the poison message is gone without a
 * trace), an abandon beside a complete completes a message whose handler failed (its
 * retry is lost), two dead-letters share the first one's reason. Completes may share a
 * frame (the same outcome); every other settlement runs alone: it waits for the
 * settlements in flight and the next ones wait for it.
 *
 * @example
 * ```ts
 * const gate = new DispositionGate();
 * await gate.run('exclusive', () => receiver.deadLetterMessage(message, { deadLetterReason: 'max-attempts' }));
 * ```
 */
export class DispositionGate {
  private readonly inFlight = new Set<Promise<unknown>>();
  private lastExclusive: Promise<unknown> = Promise.resolve();

  run<T>(kind: 'shared' | 'exclusive', settle: () => Promise<T>): Promise<T> {
    const before = kind === 'exclusive' ? Promise.all([...this.inFlight]) : this.lastExclusive;
    const result = before.then(settle, settle);
    const done = result.then(
      () => {},
      () => {},
    );
    this.inFlight.add(done);
    void done.then(() => this.inFlight.delete(done));
    if (kind === 'exclusive') this.lastExclusive = done;
    return result;
  }
}
