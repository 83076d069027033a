import { setMaxListeners } from 'node:events';
import type { Channel, ConsumeMessage } from 'amqplib';
import { ChannelClosedError } from './errors.js';

/**
 * One consumer channel and its generation. Every delivery keeps the `DeliveryChannel`
 * that delivered it and is settled through it and nowhere else: delivery tags are
 * numbered per channel and restart at 1 on a new one, so acking an old delivery's tag
 * on the current channel would ack a different, unprocessed message. Settles are
 * one message at a time (`allUpTo` is never used).
 *
 * @example
 * ```ts
 * const current = new DeliveryChannel(await connection.createChannel(), 1);
 * current.settle('ack', msg); // throws ChannelClosedError once the channel is gone
 * ```
 */
export class DeliveryChannel {
  private isAlive = true;
  private readonly closed = new AbortController();
  /** Set while a consumer is registered on this channel. */
  consumerTag: string | undefined;

  constructor(
    readonly channel: Channel,
    /** 1 for the adapter's first consumer channel, +1 for each one after. */
    readonly generation: number,
  ) {
    // Every delivery in flight on the channel listens (up to prefetch at once, each removed
    // when its delivery settles): more than Node's default of 10 is expected, not a leak.
    setMaxListeners(0, this.closed.signal);
  }

  /** False once the channel closed (by the broker, a connection loss, or us). */
  get alive(): boolean {
    return this.isAlive;
  }

  /** Aborts when the channel closes: every delivery it made is then lost to us. */
  get lost(): AbortSignal {
    return this.closed.signal;
  }

  markClosed(): void {
    this.isAlive = false;
    if (!this.closed.signal.aborted) this.closed.abort(new ChannelClosedError(this.generation));
  }

  /** Throws {@link ChannelClosedError} when the channel is gone. */
  assertAlive(): void {
    if (!this.isAlive) throw new ChannelClosedError(this.generation);
  }

  /**
   * Sends one settlement for `msg` on this channel. `'nack'` (requeue, not counted as a
   * failure by quorum queues on RabbitMQ 4.3+) releases; `'reject'` (requeue, counted)
   * retries.
   */
  settle(operation: 'ack' | 'nack' | 'reject', msg: ConsumeMessage): void {
    this.assertAlive();
    try {
      if (operation === 'ack') this.channel.ack(msg, false);
      else if (operation === 'nack') this.channel.nack(msg, false, true);
      else this.channel.reject(msg, true);
    } catch (error) {
      // amqplib throws IllegalOperationError once the channel is closing or closed, which
      // can be before its 'close' event reached us.
      this.markClosed();
      throw new ChannelClosedError(this.generation, { cause: error });
    }
  }
}
