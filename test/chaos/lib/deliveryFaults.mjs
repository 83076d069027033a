/**
 * Adapter and delivery wrappers for the chaos consumers: every settlement the core asks
 * for can be dropped (a lost ack), frozen (a crash point between commit and ack), or, in
 * an in-process "virtual process", swallowed once that process has been killed.
 *
 * Why not the testkit's FaultInjector itself: it keys its faults on message IDs chosen up
 * front, while chaos decides per delivery at random. Both build their deliveries with the
 * testkit's `withSettlements`, which forwards every member (lease signals included).
 */
import { resolveMessageId } from '@oncely/core';
import { withSettlements } from '@oncely/testkit';

/**
 * Wraps `adapter` so that every delivery it dispatches goes through `intercept`, which
 * calls `dispatch` (the core's) with the delivery, changed or not, or decides not to.
 *
 * @param {import('@oncely/core').BrokerAdapter} adapter
 * @param {(delivery: import('@oncely/core').Delivery, dispatch: (d: import('@oncely/core').Delivery) => Promise<void>) => Promise<void>} intercept
 * @returns {import('@oncely/core').BrokerAdapter}
 */
export function interceptDeliveries(adapter, intercept) {
  return {
    get type() {
      return adapter.type;
    },
    get lease() {
      return adapter.lease;
    },
    get defaultIdStrategy() {
      return adapter.defaultIdStrategy;
    },
    start(runtime) {
      // Inherit every runtime member (getters included); only dispatch is intercepted.
      const wrapped = Object.create(runtime, {
        dispatch: {
          value: (/** @type {import('@oncely/core').Delivery} */ d) => intercept(d, runtime.dispatch),
        },
      });
      return adapter.start(wrapped);
    },
    pause: adapter.pause ? () => adapter.pause?.() ?? Promise.resolve() : undefined,
    resume: adapter.resume ? () => adapter.resume?.() ?? Promise.resolve() : undefined,
    stop: () => adapter.stop(),
    close: () => adapter.close(),
  };
}

/**
 * The message ID the core will see, or undefined (poison, or a strategy that throws).
 *
 * @param {import('@oncely/core').IdStrategy} strategy
 * @param {import('@oncely/core').Delivery} delivery
 */
export function messageIdOf(strategy, delivery) {
  try {
    return resolveMessageId(strategy, delivery.envelope);
  } catch {
    return undefined;
  }
}

/**
 * The kill switch of an in-process "virtual process": after `kill()` nothing it does
 * reaches the broker any more (settlements and lease renewals are swallowed, new
 * deliveries are never handled), exactly as if the process had died. Its deliveries
 * come back when their leases lapse.
 */
export class KillSwitch {
  killed = false;
  /** @type {(error: Error) => void} */
  #reject = () => {};
  /** Rejects once killed: code frozen at a crash point awaits it and unwinds. */
  dead = new Promise((_, reject) => {
    this.#reject = reject;
  });

  constructor() {
    this.dead.catch(() => {});
  }

  kill() {
    if (this.killed) return;
    this.killed = true;
    this.#reject(new Error('virtual process killed'));
  }

  /**
   * @param {import('@oncely/core').BrokerAdapter} adapter
   * @returns {import('@oncely/core').BrokerAdapter}
   */
  wrap(adapter) {
    const gate = (/** @type {() => Promise<void>} */ call) => (this.killed ? Promise.resolve() : call());
    return interceptDeliveries(adapter, (delivery, dispatch) => {
      // A dead process never handles what its receive loop still pulled in: the lease lapses.
      if (this.killed) return Promise.resolve();
      return dispatch(
        withSettlements(delivery, {
          ack: () => gate(() => delivery.ack()),
          retryLater: (ms, info) => gate(() => delivery.retryLater(ms, info)),
          deadLetter: (reason, detail, info) => gate(() => delivery.deadLetter(reason, detail, info)),
          release: () => gate(() => delivery.release()),
          ...(delivery.extendLease
            ? { extendLease: (ms) => gate(() => /** @type {any} */ (delivery).extendLease(ms)) }
            : {}),
        }),
      );
    });
  }
}
