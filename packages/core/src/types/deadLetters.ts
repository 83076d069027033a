/**
 * Dead letters an operator works with: what an adapter implements (a {@link DeadLetterSession}
 * on its dead-letter queue) and what a store keeps about them ({@link DeadLetterLog}).
 * The shared logic (IDs, failure groups, dry runs, discard records) is `DeadLetters` in
 * src/deadLetters.ts.
 */

import type { Envelope } from './adapter.js';
import type { IdStrategy } from './config.js';

/** One dead letter as the adapter read it from the broker, held until the session closes. */
export interface HeldDeadLetter {
  /**
   * What the consumer would see: body, attributes and the broker's ID fields, so the core
   * resolves the message ID with the consumer's own ID strategy.
   */
  envelope: Pick<
    Envelope,
    'body' | 'attributes' | 'producerMessageId' | 'brokerMessageId' | 'deduplicationId'
  >;
  /** Why it was dead-lettered (`max-attempts`, `invalid-body`, ..., or the broker's own, e.g. `rejected`). */
  reason: string;
  /** The last error or the reason's detail, as the consumer recorded it. */
  error?: string;
  /** Attempts made before it was dead-lettered, where recorded. */
  attempts?: number;
  /** When it first failed / was dead-lettered, where the broker or the headers tell. */
  firstFailedAt?: Date;
  lastFailedAt?: Date;
}

/**
 * One pass over a broker's dead-letter queue. `read()` takes every dead letter without
 * removing it (the broker keeps each one until `replay` or `remove` says so); `close()`
 * gives back everything read and not removed, in its order. A process that dies with a
 * session open loses nothing: the broker takes the unsettled copies back (RabbitMQ: the
 * connection closes, SQS: the visibility timeout runs out).
 */
export interface DeadLetterSession {
  /** The dead-letter queue, for messages (`payments.dlq`). */
  readonly name: string;
  /** The ID strategy the adapter uses when the consumer config names none. */
  readonly defaultIdStrategy: IdStrategy;
  /** Every dead letter, in the queue's order. */
  read(): Promise<HeldDeadLetter[]>;
  /**
   * Re-sends `letter` to the consumer's source with its original message ID and
   * attributes (without the dead-letter headers and attempt count), waits until the broker
   * confirmed the send, and only then removes it from the dead-letter queue. A crash in
   * between leaves it in both: at least once, and the consumer's marker absorbs the copy.
   */
  replay(letter: HeldDeadLetter): Promise<void>;
  /** Removes `letter` from the dead-letter queue for good. */
  remove(letter: HeldDeadLetter): Promise<void>;
  /** Gives back what was read and not removed; ends the session. */
  close(): Promise<void>;
}

/**
 * A dead letter discarded by an operator, as the store records it before removing it.
 * SQL stores read it back with `toDiscardRecord` (src/discardRecord.ts).
 */
export interface DiscardRecord {
  consumer: string;
  /** The message ID (absent for a dead letter without one, `missing-id`). */
  messageId?: string;
  reason: string;
  error?: string;
  /** Who discarded it (the CLI: `$ONCELY_OPERATOR`, else the OS user). */
  discardedBy: string;
  discardedAt: Date;
}

/** What a store keeps about dead letters: marker look-ups for dry runs and the discard log. */
export interface DeadLetterLog {
  /** Which of `messageIds` have a completed marker for `consumer` (a replay would be a duplicate). */
  processed(consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>>;
  /** Writes discard records (one commit) before the dead letters are removed. */
  recordDiscards(records: readonly DiscardRecord[]): Promise<void>;
  /** The discard records of one message, oldest first. */
  discards(consumer: string, messageId: string): Promise<DiscardRecord[]>;
}
