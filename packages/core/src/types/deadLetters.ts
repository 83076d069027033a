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

/**
 * What was done to one dead letter of a log-based dead-letter queue (Kafka), which cannot
 * forget a record: the store remembers it instead, keyed by the letter's position.
 */
export interface DeadLetterLedgerEntry {
  consumer: string;
  /** The dead-letter queue (Kafka: the DLQ topic). */
  queue: string;
  partition: number;
  /** The dead letter's offset, in decimal. */
  offset: string;
  /**
   * Ties the row to the record it was written for (a hash of the record's own evidence), so
   * that a recreated topic's record at the same position is not taken for it.
   */
  fingerprint: string;
  /**
   * `replaying`: a re-send was about to be made (or was made, unconfirmed); `replayed`: the
   * source has the copy; `discarded`: an operator threw it away (after the discard record).
   */
  state: 'replaying' | 'replayed' | 'discarded';
  messageId?: string;
  /**
   * Where the copy goes: `from` is the target partition's end offset read before the send
   * (a copy sent before a crash lies at or above it); `offset` the copy's, once known.
   */
  target?: { topic: string; partition: number; from: string; offset?: string };
  at: Date;
}

/** The lock of one pass over a dead-letter queue, held on a database connection of its own. */
export interface DeadLetterPassLock {
  /** The connection holding it died (the lock is gone with it): the pass must write nothing more. */
  readonly lost: boolean;
  /** Releases the lock and its connection; never throws. */
  release(): Promise<void>;
}

/**
 * The store side of a log-based dead-letter queue: a ledger of what each dead letter
 * became, and a pass lock that a killed process lets go of at once (it is tied to a
 * database connection, which dies with the process).
 */
export interface DeadLetterLedger {
  /** The pass lock of (consumer, queue); undefined when another pass holds it. */
  tryLock(consumer: string, queue: string): Promise<DeadLetterPassLock | undefined>;
  /** Every row of (consumer, queue), by partition and offset. */
  entries(consumer: string, queue: string): Promise<DeadLetterLedgerEntry[]>;
  /** Inserts or replaces `entries` (by consumer, queue, partition, offset) in one commit. */
  put(entries: readonly DeadLetterLedgerEntry[]): Promise<void>;
  /** Deletes the rows at these positions in one commit. */
  delete(
    consumer: string,
    queue: string,
    keys: ReadonlyArray<{ partition: number; offset: string }>,
  ): Promise<void>;
  /**
   * Deletes the rows below each partition's first retained offset (`logStart`: partition →
   * offset): their records expired. Partitions not named lose every row. Returns how many.
   */
  prune(consumer: string, queue: string, logStart: ReadonlyMap<number, string>): Promise<number>;
}

/** What a store keeps about dead letters: marker look-ups for dry runs and the discard log. */
export interface DeadLetterLog {
  /** Which of `messageIds` have a completed marker for `consumer` (a replay would be a duplicate). */
  processed(consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>>;
  /** Writes discard records (one commit) before the dead letters are removed. */
  recordDiscards(records: readonly DiscardRecord[]): Promise<void>;
  /** The discard records of one message, oldest first. */
  discards(consumer: string, messageId: string): Promise<DiscardRecord[]>;
  /**
   * The ledger a log-based dead-letter queue (Kafka) needs; absent where the store cannot
   * hold a connection-bound lock (a caller's own transactions).
   */
  readonly ledger?: DeadLetterLedger;
}
