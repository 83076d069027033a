import { LeaseLostError, OncelyError, type OncelyErrorCode } from '@oncely/core';

/**
 * Stable code of {@link RabbitMqOperationError}.
 *
 * @example
 * ```ts
 * if (isOncelyError(error) && error.code === RABBITMQ_OPERATION_FAILED) console.warn(error.message);
 * ```
 */
export const RABBITMQ_OPERATION_FAILED = 'RABBITMQ_OPERATION_FAILED' as OncelyErrorCode;

/**
 * A settlement was attempted through a channel that is gone. RabbitMQ delivery tags are
 * numbered per channel and restart at 1 on a new one, so the settle is refused rather
 * than sent on the current channel (where the same tag names a different, unprocessed
 * message). The broker has already requeued the message; its redelivery meets the
 * processed marker.
 *
 * It is a {@link LeaseLostError} (code `LEASE_LOST`): it is the reason of the delivery's
 * `lost` signal, which aborts the handler's `ctx.signal`, and the core counts a settle
 * that throws it as `ackFailed`.
 *
 * @example
 * ```ts
 * consumer.on('ackFailed', (e) => {
 *   if (e.error instanceof ChannelClosedError) console.warn('redelivery expected', e.messageId, e.error.generation);
 * });
 * ```
 */
export class ChannelClosedError extends LeaseLostError {
  constructor(
    /** Generation of the channel that delivered the message (1 for the first channel). */
    readonly generation: number,
    options?: ErrorOptions,
  ) {
    super(
      `the RabbitMQ channel that delivered this message (generation ${generation}) is closed; ` +
        'the broker requeued the message and will deliver it again',
      options,
    );
  }
}

/**
 * A RabbitMQ operation failed for a reason other than a closed channel: a publish the
 * broker nacked, returned as unroutable or never confirmed, or a channel error.
 *
 * `code` is `'RABBITMQ_OPERATION_FAILED'`; `operation` names what failed (`'retry'`,
 * `'dead-letter'`, `'publish'`, `'ack'`...); `replyCode` is the AMQP reply code when the
 * broker sent one (404 NOT_FOUND, 406 PRECONDITION_FAILED, 312 NO_ROUTE...).
 *
 * @example
 * ```ts
 * try { await publish(channel, { queue: 'orders' }, order, { messageId: order.id }); }
 * catch (e) { if (e instanceof RabbitMqOperationError && e.replyCode === 312) console.error('no such queue'); }
 * ```
 */
export class RabbitMqOperationError extends OncelyError {
  constructor(
    readonly operation: string,
    message: string,
    readonly replyCode?: number,
    options?: ErrorOptions,
  ) {
    // The core's code union has no entry for adapter-specific failures; the cast keeps a
    // stable, honest code instead of borrowing an unrelated one.
    super(RABBITMQ_OPERATION_FAILED, `RabbitMQ ${operation} failed: ${message}`, options);
  }
}

/**
 * The AMQP reply code an amqplib error carries (`error.code`, set from the server's
 * channel or connection close frame), or undefined. Never looks at message text.
 *
 * @example
 * ```ts
 * try { await channel.checkQueue('orders'); } catch (e) { if (amqpReplyCode(e) === 404) console.error('missing'); }
 * ```
 */
export function amqpReplyCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/**
 * AMQP reply codes the adapter reacts to.
 *
 * @example
 * ```ts
 * if (amqpReplyCode(error) === AMQP_NOT_FOUND) console.error('no such queue');
 * ```
 */
export const AMQP_NOT_FOUND = 404;
/** AMQP reply code 406: a redeclare with other arguments, an unknown delivery tag, a consumer timeout. */
export const AMQP_PRECONDITION_FAILED = 406;
/** AMQP reply code 403: the user may not use the vhost, queue or exchange. */
export const AMQP_ACCESS_REFUSED = 403;
/** AMQP reply code 312: a mandatory publish that no queue was bound to receive. */
export const AMQP_NO_ROUTE = 312;
