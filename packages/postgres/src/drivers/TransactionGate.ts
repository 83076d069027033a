import { AsyncLocalStorage } from 'node:async_hooks';
import { StoreReentrancyError } from '@oncely/core';

/** One transaction's mark in the async context; cleared when the transaction ends. */
interface Frame {
  active: boolean;
}

/**
 * Runs one transaction at a time on a single-connection database (PGlite), first come
 * first served, and refuses re-entry.
 *
 * Code running inside a transaction (a handler holding `ctx.tx`) that calls the store
 * again — `store.transaction()`, `recordAttempt()`, ... instead of using `ctx.tx` —
 * would wait for the very transaction it runs in: a silent deadlock. The gate marks
 * each transaction in an `AsyncLocalStorage` and throws `StoreReentrancyError` instead.
 * Callers outside any transaction simply queue.
 */
export class TransactionGate {
  private tail: Promise<void> = Promise.resolve();
  private readonly frames = new AsyncLocalStorage<Frame>();

  /** Throws when called from inside one of this gate's transactions. */
  assertOutside(operation: string): void {
    if (!this.frames.getStore()?.active) return;
    throw new StoreReentrancyError(
      `PostgresStore.${operation} was called from inside one of the store's own transactions (a handler or ` +
        'transaction callback). The embedded PGlite store has a single connection and runs one transaction at a ' +
        'time, so this call would wait forever for the transaction that is making it. Use ctx.tx (the ' +
        'transaction you were given) for SQL inside a handler, and call store methods only outside it.',
    );
  }

  /** Runs `work` once every earlier transaction has finished. */
  async run<T>(operation: string, work: () => Promise<T>): Promise<T> {
    this.assertOutside(operation);
    const previous = this.tail;
    let done!: () => void;
    this.tail = new Promise<void>((resolve) => {
      done = resolve;
    });
    await previous;
    const frame: Frame = { active: true };
    try {
      return await this.frames.run(frame, work);
    } finally {
      // Work the transaction left running (an un-awaited promise) keeps the async
      // context but must not be refused once the transaction is over.
      frame.active = false;
      done();
    }
  }
}

/** Stores sharing one PGlite instance share its gate: it is one connection. */
const gates = new WeakMap<object, TransactionGate>();

/** The gate of a PGlite instance. */
export function gateFor(instance: object): TransactionGate {
  let gate = gates.get(instance);
  if (!gate) {
    gate = new TransactionGate();
    gates.set(instance, gate);
  }
  return gate;
}
