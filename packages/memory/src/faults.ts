import type { BrokerFaults, FaultTarget } from './types.js';

/** Rates (0 to 1) of each fault, and the seed that makes the pattern reproducible. */
export interface RandomFaultsOptions {
  /** Same seed, same decisions. @default 1 */
  seed?: number;
  /** Share of acks that are lost. @default 0 */
  dropAck?: number;
  /** Share of deliveries handed out twice. @default 0 */
  duplicateDelivery?: number;
  /** Share of sends stored twice (producer retries). @default 0 */
  duplicateSend?: number;
  /** Share of lease extensions that fail with a transient error. @default 0 */
  failExtend?: number;
  /**
   * Apply faults to deliveries up to this delivery count only, so every message
   * eventually settles even with high rates. @default unlimited
   */
  maxDeliveryCount?: number;
}

/**
 * Builds fault hooks whose decisions are a pure function of `(seed, fault, message ID,
 * delivery count)`. They do not depend on timing or on the order calls arrive in, so
 * a concurrent run is reproducible, and two queues fed the same messages (a naive and a
 * protected consumer side by side) see the same fault pattern.
 *
 * @example
 * ```ts
 * broker.faults = randomFaults({ seed: 42, dropAck: 0.2, duplicateDelivery: 0.05 });
 * ```
 */
export function randomFaults(options: RandomFaultsOptions = {}): BrokerFaults {
  const seed = options.seed ?? 1;
  const limit = options.maxDeliveryCount ?? Number.POSITIVE_INFINITY;
  const hook = (fault: string, rate: number | undefined) => {
    if (rate === undefined || rate <= 0) return undefined;
    return (id: string, target: FaultTarget) =>
      target.deliveryCount <= limit && decide(seed, `${fault}|${id}|${target.deliveryCount}`) < rate;
  };
  const faults: BrokerFaults = {};
  const dropAck = hook('dropAck', options.dropAck);
  const duplicateDelivery = hook('duplicateDelivery', options.duplicateDelivery);
  const duplicateSend = hook('duplicateSend', options.duplicateSend);
  const failExtend = hook('failExtend', options.failExtend);
  if (dropAck) faults.dropAck = dropAck;
  if (duplicateDelivery) faults.duplicateDelivery = duplicateDelivery;
  if (duplicateSend) faults.duplicateSend = duplicateSend;
  if (failExtend) faults.failExtend = failExtend;
  return faults;
}

/**
 * A small seedable pseudo-random generator (mulberry32): numbers in [0, 1), the same
 * sequence for the same seed.
 *
 * @example
 * ```ts
 * const random = seededRandom(42);
 * const amount = 500 + Math.floor(random() * 10_000);
 * ```
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    return mix(state);
  };
}

/** A number in [0, 1) derived from the seed and the key alone. */
function decide(seed: number, key: string): number {
  // FNV-1a over the key, salted with the seed, then one mulberry32 round to spread the bits.
  let hash = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return mix((hash + 0x6d2b79f5) >>> 0);
}

function mix(value: number): number {
  let t = value;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
