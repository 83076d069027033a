/** Events: what the consumer emits. */

import type { DeadLetterReason } from './adapter.js';
import type { PayloadMismatch } from './store.js';

/** Payload of every consumer event. */
export interface ConsumerEvent {
  consumer: string;
  /** Absent when the message had no ID. */
  messageId?: string;
  /** Attempt number, where known. */
  attempt?: number;
  /** Handler duration (processed / failed). */
  durationMs?: number;
  /** Retry delay (retried). */
  delayMs?: number;
  /** Dead-letter reason (deadLettered). */
  reason?: DeadLetterReason;
  /** The two fingerprints (payloadMismatch, and the deadLettered that follows it). */
  payloadMismatch?: PayloadMismatch;
  error?: unknown;
}

/** Event names a consumer emits. */
export type ConsumerEventName =
  | 'received'
  | 'processed'
  | 'duplicate'
  /** A duplicate ID whose payload fingerprint differs from the stored one. */
  | 'payloadMismatch'
  | 'failed'
  | 'retried'
  | 'deadLettered'
  | 'leaseRenewed'
  | 'leaseLost'
  | 'ackFailed'
  | 'takeover'
  | 'storeUnavailable'
  | 'storeRecovered'
  | 'released';
