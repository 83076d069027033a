import type { PubSub, Message as PubSubMessage, SubscriberOptions, Subscription } from '@google-cloud/pubsub';
import type { Logger } from '@oncely/core';

/** First pause before reopening a stream that ended; it doubles per end in a row. */
const FIRST_REOPEN_DELAY_MS = 200;
/** The longest pause between reopens. */
const MAX_REOPEN_DELAY_MS = 10_000;
/**
 * How often the stream is checked for an end no event reported. Every end seen so far
 * came with an `error` event (checked at once); this is the safety net, not the path.
 */
const WATCHDOG_INTERVAL_MS = 5_000;

/**
 * What the adapter reports about its stream (`adapter.health`).
 *
 * @example
 * ```ts
 * const { receiving, lastStreamError } = (adapter as PubSubAdapter).health;
 * if (!receiving) console.warn('Pub/Sub stream down', lastStreamError);
 * ```
 */
export interface PubSubAdapterHealth {
  /**
   * The subscriber is open: its stream receives, or the client is reopening it after a
   * status it retries itself (UNAVAILABLE and the like). False between an end the client
   * gave up on and the adapter's reopen, and after `stop()`.
   */
  receiving: boolean;
  /** A reopen is scheduled after the stream ended. */
  reopening: boolean;
  /** Ends the client did not recover from (the adapter reopened the stream after each). */
  streamEnds: number;
  /** What the stream last failed with (its gRPC `code` when it had one), and when. */
  lastStreamError?: { code?: number; message: string; at: Date };
  /** Messages waiting out a retry backoff or parked (`stats.deferred`). */
  deferred: number;
  /** Of those, poison messages parked (600 s at a time) for want of a dead-letter topic. */
  parked: number;
  /**
   * Deferred messages hold every place the service may fill (each stream's
   * `concurrency + maxDeferredMessages`): nothing new is received until one's deadline
   * passes. With parked messages that is for good: configure a dead-letter topic.
   */
  stalled: boolean;
}

/** What {@link SubscriberStream} itself reports; the adapter adds the rest. */
export type StreamHealth = Pick<
  PubSubAdapterHealth,
  'receiving' | 'reopening' | 'streamEnds' | 'lastStreamError'
>;

/** What a {@link SubscriberStream} needs from its adapter. */
export interface SubscriberStreamOptions {
  pubsub: PubSub;
  subscriptionName: string;
  /** The client's subscriber options, read at the first open. */
  subscriberOptions(): SubscriberOptions;
  onMessage(message: PubSubMessage): void;
  /**
   * A message the client received but will never hand out: with exactly-once it drops a
   * message whose receipt modAck failed (three transient failures in a row are enough),
   * and the service counts it against the stream's flow control until the stream's
   * deadline (60 s). Hooked through the client's `_discardMessage` (not public API).
   */
  onDiscarded?(message: PubSubMessage): void;
  /** Before each reopen (the adapter re-reads the subscription); a rejection is logged. */
  beforeReopen?(): Promise<void>;
  /** After each reopen (the adapter counts them). */
  onReopen?(): void;
  reportError(error: unknown, context: string): void;
  log: Logger;
}

/**
 * The client's subscriber (StreamingPull) for one subscription, kept open for as long as
 * the consumer runs. The client retries streams that end with a status it retries
 * (UNAVAILABLE, DEADLINE_EXCEEDED, ...) itself; after any other end (NOT_FOUND while a
 * subscription is deleted and recreated, INVALID_ARGUMENT, FAILED_PRECONDITION) it
 * closes the subscriber and stays closed. This reopens it with a growing pause (200 ms,
 * doubling, at most 10 s) and says so in the log and in {@link PubSubAdapterHealth};
 * only `close()` ends it.
 *
 * It does not wait for the client's `'close'` event: with a zero close timeout (the
 * adapter's, see PubSubAdapter) the client never emits it. An `'error'` event, a
 * `'close'` event and a periodic check all lead to the same test, `subscription.isOpen`.
 *
 * @example
 * ```ts
 * const stream = new SubscriberStream({ pubsub, subscriptionName, subscriberOptions, onMessage, reportError, log });
 * stream.open();
 * // ...
 * await stream.close();
 * ```
 */
export class SubscriberStream {
  private subscription: Subscription | undefined;
  // `closed` and `watchdog` are read by test/streamEnds.test.ts (nothing can reopen after close()).
  private closed = false;
  private reopenTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private endsInARow = 0;
  private streamEnds = 0;
  private lastStreamError: PubSubAdapterHealth['lastStreamError'];

  constructor(private readonly options: SubscriberStreamOptions) {}

  /** The client's subscription object, once opened (the adapter reads its internals). */
  get client(): Subscription | undefined {
    return this.subscription;
  }

  get health(): StreamHealth {
    return {
      receiving: !this.closed && !!this.subscription?.isOpen,
      reopening: this.reopenTimer !== undefined,
      streamEnds: this.streamEnds,
      ...(this.lastStreamError ? { lastStreamError: this.lastStreamError } : {}),
    };
  }

  open(): void {
    if (this.closed) return;
    if (!this.subscription) {
      const { pubsub, subscriptionName } = this.options;
      const subscription = pubsub.subscription(subscriptionName, this.options.subscriberOptions());
      this.subscription = subscription;
      subscription.on('message', (message: PubSubMessage) => {
        this.endsInARow = 0;
        this.options.onMessage(message);
      });
      subscription.on('error', (error: unknown) => {
        const code = (error as { code?: unknown }).code;
        this.lastStreamError = {
          ...(typeof code === 'number' ? { code } : {}),
          message: error instanceof Error ? error.message : String(error),
          at: new Date(),
        };
        this.options.reportError(error, 'the Pub/Sub subscriber stream failed');
        // The client closes its subscriber right after this event when it gives up.
        setImmediate(() => this.check());
      });
      subscription.on('close', () => this.check());
      const subscriber = (subscription as unknown as { _subscriber?: { _discardMessage?: unknown } })
        ._subscriber;
      const onDiscarded = this.options.onDiscarded;
      if (onDiscarded && subscriber && typeof subscriber._discardMessage === 'function') {
        subscriber._discardMessage = (message: PubSubMessage) => onDiscarded(message);
      }
      this.watchdog = setInterval(() => this.check(), WATCHDOG_INTERVAL_MS);
      this.watchdog.unref();
    } else {
      this.subscription.open();
    }
  }

  /** Closes the stream for good (stop): nothing reopens it after this. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reopenTimer);
    this.reopenTimer = undefined;
    clearInterval(this.watchdog);
    await this.subscription?.close();
  }

  /** Drops the client's listeners (after close). */
  dispose(): void {
    this.subscription?.removeAllListeners();
  }

  /** Reopens the subscriber when it closed while the consumer runs. */
  private check(): void {
    const subscription = this.subscription;
    if (this.closed || !subscription || subscription.isOpen || this.reopenTimer) return;
    this.streamEnds++;
    const delay = Math.min(MAX_REOPEN_DELAY_MS, FIRST_REOPEN_DELAY_MS * 2 ** Math.min(this.endsInARow++, 10));
    const cause = this.lastStreamError;
    this.options.log.warn(
      `pubsub: the subscriber stream ended${cause ? ` (${cause.code ?? ''} ${cause.message})` : ''} and the client will not reopen it; reopening in ${delay} ms`,
      { subscription: this.options.subscriptionName, streamEnds: this.streamEnds },
    );
    this.reopenTimer = setTimeout(() => void this.reopen(), delay);
    this.reopenTimer.unref();
  }

  private async reopen(): Promise<void> {
    try {
      await this.options.beforeReopen?.();
    } catch (error) {
      this.options.log.warn('pubsub: reading the subscription before reopening its stream failed', {
        subscription: this.options.subscriptionName,
        error,
      });
    }
    this.reopenTimer = undefined;
    if (this.closed) return;
    this.options.log.info('pubsub: reopening the subscriber stream', {
      subscription: this.options.subscriptionName,
    });
    this.open();
    this.options.onReopen?.();
  }
}
