import type { DeadLetterReason, Delivery, Envelope, SettlementInfo } from '@oncely/core';
import type { ConsumeMessage } from 'amqplib';
import { ConfirmTimeoutError } from './ConfirmedPublisher.js';
import type { DeliveryChannel } from './DeliveryChannel.js';
import { attemptsSoFar } from './envelope.js';
import { ChannelClosedError, RabbitMqOperationError } from './errors.js';

/** What a delivery needs from its adapter to settle by publishing a copy. */
export interface CopyPublisher {
  readonly retryMode: 'topology' | 'requeue';
  /** Publishes a retry copy (confirmed) that reaches the work queue after about `delayMs`. */
  publishRetryCopy(msg: ConsumeMessage, attempts: number, delayMs: number): Promise<void>;
  /** Publishes a dead letter with the reason in its headers (confirmed). */
  publishDeadLetter(
    msg: ConsumeMessage,
    attempts: number,
    reason: DeadLetterReason,
    detail: string,
  ): Promise<void>;
  /**
   * After a copy could not be published: give the original back to the broker after
   * `delayMs` (through its own channel), so it neither sits unacked until the channel
   * closes nor loops hot.
   */
  requeueLater(channel: DeliveryChannel, msg: ConsumeMessage, delayMs: number): void;
}

/** How long a message whose copy could not be published waits before it is requeued. */
const REQUEUE_AFTER_FAILED_COPY_MS = 5000;

/**
 * One RabbitMQ delivery and its settlements. Each settles through the channel that
 * delivered it; once that channel is gone every settlement rejects with
 * {@link ChannelClosedError} (the core counts it as `ackFailed`; the broker already
 * requeued the message), and `lost` aborts, which aborts the handler's `ctx.signal`.
 * RabbitMQ has no lease to renew: a delivery stays ours for as long as its channel lives.
 *
 * Copies (retry, dead letter) are confirmed by the broker before the original is acked:
 * a crash between the two leaves both, and the duplicate meets the processed marker; the
 * reverse order could lose the message.
 *
 * @example
 * ```ts
 * const delivery = new RabbitMqDelivery(adapter, currentChannel, msg, toEnvelope(msg, rules));
 * await runtime.dispatch(delivery);
 * ```
 */
export class RabbitMqDelivery implements Delivery {
  private settledBy: string | undefined;

  constructor(
    private readonly host: CopyPublisher,
    readonly channel: DeliveryChannel,
    readonly msg: ConsumeMessage,
    readonly envelope: Envelope,
  ) {}

  /** Aborts when the delivering channel closes (the broker has requeued the message). */
  get lost(): AbortSignal {
    return this.channel.lost;
  }

  async ack(): Promise<void> {
    this.claim('ack');
    this.channel.settle('ack', this.msg);
  }

  /** `basic.nack` with requeue: on RabbitMQ 4.3+ quorum queues it does not count as a failed delivery. */
  async release(): Promise<void> {
    this.claim('release');
    this.channel.settle('nack', this.msg);
  }

  async retryLater(delayMs: number, info?: SettlementInfo): Promise<void> {
    this.claim('retry');
    if (this.host.retryMode === 'requeue') {
      // basic.reject counts toward a quorum queue's delivery-limit on every version;
      // basic.nack stopped counting on 4.3.
      this.channel.settle('reject', this.msg);
      return;
    }
    // A copy published for a delivery whose channel is already gone would run beside the
    // broker's redelivery of the original: check first.
    this.channel.assertAlive();
    await this.publishThenAck(
      () => this.host.publishRetryCopy(this.msg, this.attempts(info), delayMs),
      Math.max(delayMs, REQUEUE_AFTER_FAILED_COPY_MS),
    );
  }

  async deadLetter(reason: DeadLetterReason, detail: string, info?: SettlementInfo): Promise<void> {
    this.claim('dead-letter');
    this.channel.assertAlive();
    await this.publishThenAck(
      () => this.host.publishDeadLetter(this.msg, this.attempts(info), reason, detail),
      REQUEUE_AFTER_FAILED_COPY_MS,
      true,
      info,
    );
  }

  /**
   * Attempts made so far, carried on copies: the core's count when it has one (it also
   * knows the advisory count after a crash on a classic queue), else what the headers say.
   */
  private attempts(info: SettlementInfo | undefined): number {
    return info?.attempt ?? attemptsSoFar(this.msg, this.envelope);
  }

  /**
   * Publishes a copy, then acks the original. When the copy fails the original is not
   * acked: it is given back later. `park` (dead letters): instead of holding the
   * original unacked (a prefetch slot) and requeueing it to the head of the queue, where
   * it fails again and starves the messages behind it for as long as the dead-letter
   * route is down, park it in the delay queue and ack it; it comes back after the delay
   * to try again.
   */
  private async publishThenAck(
    publish: () => Promise<void>,
    requeueAfterMs: number,
    park = false,
    info?: SettlementInfo,
  ): Promise<void> {
    const giveBack = () => {
      if (park && this.host.retryMode === 'topology' && this.channel.alive) {
        void this.host.publishRetryCopy(this.msg, this.attempts(info), requeueAfterMs).then(
          () => this.ackIfAlive(),
          () => this.host.requeueLater(this.channel, this.msg, requeueAfterMs),
        );
        return;
      }
      this.host.requeueLater(this.channel, this.msg, requeueAfterMs);
    };
    try {
      await publish();
    } catch (error) {
      if (error instanceof ConfirmTimeoutError) {
        // The copy may still be confirmed: requeueing the original now would leave the
        // message on two lines (the copy and the original). Settle on the broker's answer.
        void error.lateConfirm.then((outcome) => {
          if (outcome === 'ack') this.ackIfAlive();
          else giveBack();
        });
      } else if (!(error instanceof ChannelClosedError)) {
        giveBack();
      }
      throw error;
    }
    this.channel.settle('ack', this.msg);
  }

  /** The copy was confirmed late: the original is done (if its channel is gone, the broker redelivers it and the marker or the copy's count handles it). */
  private ackIfAlive(): void {
    try {
      this.channel.settle('ack', this.msg);
    } catch {
      // ChannelClosedError: nothing left to settle here.
    }
  }

  private claim(operation: string): void {
    if (this.settledBy !== undefined) {
      // A second settle of one tag would be a channel error (406 unknown delivery tag)
      // that requeues every other delivery in flight on the channel.
      throw new RabbitMqOperationError(operation, `the delivery was already settled by '${this.settledBy}'`);
    }
    this.settledBy = operation;
  }
}
