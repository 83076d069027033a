import { randomUUID } from 'node:crypto';
import type { ConfirmChannel, Message, Options } from 'amqplib';
import { PUBLISH_ID_HEADER } from './envelope.js';
import { AMQP_NO_ROUTE, amqpReplyCode, RabbitMqOperationError } from './errors.js';

/**
 * Publishes on a confirm channel and resolves only once the broker has taken
 * responsibility for the message: its `basic.ack` arrived and no `basic.return` came
 * before it.
 *
 * Every publish is `mandatory`: a confirm alone also acks a message no queue was bound
 * to receive (it was dropped), so the publish carries a unique header and a
 * `basic.return` with that header, which the broker sends before the ack, turns the
 * confirm into a rejection (reply code 312 NO_ROUTE).
 *
 * @example
 * ```ts
 * const publisher = ConfirmedPublisher.for(await connection.createConfirmChannel());
 * await publisher.send('', 'payments', Buffer.from('{}'), { messageId: 'order-1' }, 'publish');
 * ```
 */
export class ConfirmedPublisher {
  private static readonly byChannel = new WeakMap<ConfirmChannel, ConfirmedPublisher>();
  private readonly returned = new Set<string>();
  /** Outcomes still awaited for publishes whose confirm timed out (resolved 'unknown' on close). */
  private readonly late = new Set<(outcome: LateConfirm) => void>();
  private closed = false;

  private constructor(readonly channel: ConfirmChannel) {
    channel.on('return', (message: Message) => {
      const id = message.properties.headers?.[PUBLISH_ID_HEADER];
      if (typeof id === 'string') this.returned.add(id);
      else if (Buffer.isBuffer(id)) this.returned.add(id.toString('utf8'));
    });
    channel.on('close', () => {
      this.closed = true;
      for (const resolve of [...this.late]) resolve('unknown');
      this.late.clear();
      this.returned.clear();
    });
  }

  /** The publisher of `channel` (one per channel, so one `return` listener each). */
  static for(channel: ConfirmChannel): ConfirmedPublisher {
    let publisher = ConfirmedPublisher.byChannel.get(channel);
    if (!publisher) {
      publisher = new ConfirmedPublisher(channel);
      ConfirmedPublisher.byChannel.set(channel, publisher);
    }
    return publisher;
  }

  /** False once the channel closed; publish on a new one. */
  get open(): boolean {
    return !this.closed;
  }

  /**
   * Publishes and waits for the confirm. Rejects with {@link RabbitMqOperationError} when
   * the broker nacks, returns the message as unroutable, the channel closes first, or no
   * confirm arrives within `timeoutMs` (the message may still have been taken: a
   * republish can duplicate it, which the consumer's marker absorbs).
   */
  send(
    exchange: string,
    routingKey: string,
    content: Buffer,
    options: Options.Publish,
    operation: string,
    timeoutMs = 30_000,
  ): Promise<void> {
    const publishId = randomUUID();
    const headers = { ...(options.headers ?? {}), [PUBLISH_ID_HEADER]: publishId };
    // After a timeout the broker may still confirm: whoever published can learn the outcome.
    let answerLate: ((outcome: LateConfirm) => void) | undefined;
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const finish = (error?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (error) reject(error);
        else resolve();
      };
      const timer = setTimeout(() => {
        const lateConfirm = new Promise<LateConfirm>((resolveLate) => {
          answerLate = (outcome) => {
            this.late.delete(answerLate!);
            resolveLate(outcome);
          };
          this.late.add(answerLate);
          if (this.closed) answerLate('unknown');
        });
        finish(new ConfirmTimeoutError(operation, timeoutMs, lateConfirm));
      }, timeoutMs);
      timer.unref?.();
      try {
        this.channel.publish(
          exchange,
          routingKey,
          content,
          { ...options, headers, mandatory: true },
          (error) => {
            const returned = this.returned.delete(publishId);
            answerLate?.(error ? 'nack' : returned ? 'returned' : 'ack');
            if (error) {
              finish(
                new RabbitMqOperationError(
                  operation,
                  `the broker did not confirm the message (${errorText(error)})`,
                  amqpReplyCode(error),
                  { cause: error },
                ),
              );
            } else if (returned) {
              finish(
                new RabbitMqOperationError(
                  operation,
                  `unroutable: no queue is bound to exchange '${exchange}' for routing key '${routingKey}'`,
                  AMQP_NO_ROUTE,
                ),
              );
            } else {
              finish();
            }
          },
        );
      } catch (error) {
        finish(
          new RabbitMqOperationError(
            operation,
            `could not publish (${errorText(error)})`,
            amqpReplyCode(error),
            {
              cause: error,
            },
          ),
        );
      }
    });
  }
}

/** What the broker said, after all, about a publish whose confirm timed out. */
export type LateConfirm = 'ack' | 'nack' | 'returned' | 'unknown';

/**
 * No publisher confirm within the timeout. The broker may still have the message:
 * `lateConfirm` resolves with its answer when it comes (`'unknown'` if the channel
 * closes first), so the caller can act on the outcome instead of guessing.
 */
export class ConfirmTimeoutError extends RabbitMqOperationError {
  constructor(
    operation: string,
    timeoutMs: number,
    readonly lateConfirm: Promise<LateConfirm>,
  ) {
    super(operation, `no publisher confirm within ${timeoutMs} ms`);
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
