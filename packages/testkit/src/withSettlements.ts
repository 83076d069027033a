import type { Delivery } from '@oncely/core';

/** The settlement members a wrapper may replace. */
export type SettlementOverrides = Partial<
  Pick<Delivery, 'ack' | 'retryLater' | 'deadLetter' | 'release' | 'extendLease'>
>;

/**
 * A delivery whose members all forward to `delivery` — including the lease signals
 * (`leaseExpiresAt`, `receivedAt`, `lost`) the core's lease keeper reads — with some
 * settlements replaced. Fault injectors build on it so they never drop a member.
 *
 * @example
 * ```ts
 * const lostAck = withSettlements(delivery, { ack: async () => {} }); // the ack never reaches the broker
 * ```
 */
export function withSettlements(delivery: Delivery, overrides: SettlementOverrides): Delivery {
  const wrapped: Delivery = {
    get envelope() {
      return delivery.envelope;
    },
    get leaseExpiresAt() {
      return delivery.leaseExpiresAt;
    },
    get receivedAt() {
      return delivery.receivedAt;
    },
    get lost() {
      return delivery.lost;
    },
    ack: overrides.ack ?? (() => delivery.ack()),
    retryLater: overrides.retryLater ?? ((delayMs, info) => delivery.retryLater(delayMs, info)),
    deadLetter: overrides.deadLetter ?? ((reason, detail, info) => delivery.deadLetter(reason, detail, info)),
    release: overrides.release ?? (() => delivery.release()),
  };
  // The lease keeper renews only when extendLease exists: keep it absent when the broker has none.
  if (delivery.extendLease) {
    const extend = delivery.extendLease.bind(delivery);
    wrapped.extendLease = overrides.extendLease ?? ((ms) => extend(ms));
  }
  return wrapped;
}
