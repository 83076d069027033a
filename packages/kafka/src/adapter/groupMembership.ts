/**
 * One group generation as this member saw it, how a batch's records ended, and group
 * membership: heartbeats are the Kafka adapter's lease, and group errors say whether the
 * member must rejoin or has lost its partitions.
 */
import { LeaseLostError } from '@oncely/core';
import type { ClientBatch } from './clientApi.js';

/** How one dispatched record ended, from the adapter's side. */
export type Settlement =
  /** Acked or dead-lettered: its offset may be committed. */
  | { kind: 'done' }
  /** Deliver it again after `delayMs`, the partition blocked meanwhile. */
  | { kind: 'retry'; delayMs: number }
  /** Given back (stop, store outage): not committed, fetched again. */
  | { kind: 'release' }
  /** The core settled nothing (a settle call failed): fetched again after a pause. */
  | { kind: 'unsettled' };

/**
 * One group generation as this member saw it (one per `GROUP_JOIN`). kafkajs rejoins
 * only after every running `eachBatch` returned, so a batch belongs to exactly one
 * generation from start to end.
 */
export interface Generation {
  readonly id: number;
  /** Partitions of our topic assigned to this member in this generation. */
  readonly partitions: ReadonlySet<number>;
  /** Next offsets this generation committed, per partition. */
  readonly committed: Map<number, bigint>;
  /** `offsets` mode: the stored next offsets read at assignment (empty otherwise). */
  storedOffsets: Promise<Map<number, string>>;
  /** Partitions this generation has dispatched a record of (see `mayBeRedelivery`). */
  readonly started: Set<number>;
  /** A heartbeat reported a rebalance: end batches so kafkajs can rejoin. */
  rebalancing?: unknown;
  /** A heartbeat reported that this member is out of the group: nothing may be committed. */
  lost?: unknown;
}

/** The lease keeper's renewal: a heartbeat. Rejects with LeaseLostError once the member is out. */
export async function extendLease(payload: ClientBatch, generation: Generation): Promise<void> {
  if (generation.lost !== undefined) throw lostError(generation.lost);
  try {
    await payload.heartbeat();
  } catch (error) {
    const kind = classifyGroupError(error);
    if (kind === 'lost') {
      generation.lost = error;
      throw lostError(error);
    }
    if (kind === 'rebalancing') {
      // The member may keep its partitions; it must rejoin within rebalanceTimeout,
      // which it does once this batch returns. A later heartbeat reports 'lost' if not.
      generation.rebalancing = error;
      return;
    }
    throw error;
  }
}

/**
 * Group errors by what they mean for the records this member holds.
 * `REBALANCE_IN_PROGRESS` / `NOT_COORDINATOR*`: rejoin, partitions may stay.
 * `UNKNOWN_MEMBER_ID` / `ILLEGAL_GENERATION` / `FENCED_INSTANCE_ID`: the generation is
 * over without us; the partitions may already belong to another member.
 */
export function classifyGroupError(error: unknown): 'rebalancing' | 'lost' | 'other' {
  const type = (error as { type?: unknown } | null)?.type;
  switch (type) {
    case 'REBALANCE_IN_PROGRESS':
    case 'NOT_COORDINATOR_FOR_GROUP':
    case 'NOT_COORDINATOR':
      return 'rebalancing';
    case 'UNKNOWN_MEMBER_ID':
    case 'ILLEGAL_GENERATION':
    case 'FENCED_INSTANCE_ID':
      return 'lost';
    default:
      return 'other';
  }
}

export function lostError(cause: unknown): LeaseLostError {
  return new LeaseLostError(
    'this member is no longer in the consumer group; its partitions may be reassigned',
    {
      cause,
    },
  );
}
