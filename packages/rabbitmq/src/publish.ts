import { traceHeaders } from '@oncely/core';
import type { ConfirmChannel, Options } from 'amqplib';
import { ConfirmedPublisher } from './ConfirmedPublisher.js';
import { AMQP_NO_ROUTE, RabbitMqOperationError } from './errors.js';

/** Where {@link publish} sends: straight to a queue, or to an exchange with a routing key. */
export type PublishTarget = { queue: string } | { exchange: string; routingKey: string };

/**
 * Options of {@link publish}.
 *
 * @example
 * ```ts
 * await publish(channel, { queue: 'payments' }, { orderId: 42 }, { messageId: 'order-42' });
 * ```
 */
export interface PublishOptions {
  /**
   * Required: the message's stable ID (`properties.messageId`), the consumer's default
   * ID. Pass your business ID (order ID, event ID) and reuse it when you retry a
   * publish. There is no default: a random ID would make every retried publish a new
   * message that no consumer can recognise as a duplicate.
   */
  messageId: string;
  /**
   * Further attempts, with the same `messageId`, after a publish the broker nacked or did
   * not confirm within `timeoutMs` (the broker may have taken it: a duplicate is absorbed
   * by the consumer's marker). Not retried: an unroutable message (312), a closed channel.
   * @default 2
   */
  retries?: number;
  /** Pause before the first retry, doubled for each next one. @default 200 */
  retryDelayMs?: number;
  /** Application headers (also how an `{ attribute }` ID strategy finds its ID). */
  headers?: Record<string, unknown>;
  /** Survives a broker restart (delivery mode 2). @default true */
  persistent?: boolean;
  /** @default 'application/json' for values encoded as JSON, unset for Buffers and strings */
  contentType?: string;
  /** How long to wait for the publisher confirm. @default 30000 */
  timeoutMs?: number;
  /** Other AMQP properties (correlationId, type, appId, expiration, ...). */
  properties?: Omit<Options.Publish, 'messageId' | 'headers' | 'persistent' | 'mandatory' | 'contentType'>;
}

/**
 * Publishes one message with publisher confirms and resolves with its `messageId` once
 * the broker confirmed it. A nack or a missing confirm is retried (`retries`) with the
 * same `messageId`; a duplicate that creates is absorbed by an Oncely consumer. Rejects
 * (`RabbitMqOperationError`) without sending anything when `messageId` is missing or
 * empty; when no queue is bound to receive it (published `mandatory`: a bare confirm
 * would acknowledge a dropped message); when the channel closed; or when the retries are
 * spent.
 *
 * Bodies: a Buffer is sent as is, a string as UTF-8, anything else as JSON.
 *
 * The active OpenTelemetry context goes along as `traceparent`/`tracestate` (see
 * docs/observability.md), so the consumer's span joins the sender's trace.
 *
 * @example
 * ```ts
 * const connection = await amqp.connect(process.env.RABBITMQ_URL);
 * const channel = await connection.createConfirmChannel();
 * await publish(channel, { queue: 'payments' }, { orderId: 42, amount: 40 }, { messageId: 'order-42' });
 * ```
 */
export async function publish(
  channel: ConfirmChannel,
  target: PublishTarget,
  body: unknown,
  options: PublishOptions,
): Promise<string> {
  const messageId = options?.messageId;
  if (typeof messageId !== 'string' || messageId === '') {
    throw new RabbitMqOperationError(
      'publish',
      'options.messageId is required: pass a stable ID (an order or event ID) and reuse it when you retry, so the consumer can recognise a duplicate',
    );
  }
  const retries = options.retries ?? 2;
  const retryDelayMs = options.retryDelayMs ?? 200;
  const isJson = !(Buffer.isBuffer(body) || typeof body === 'string');
  const content = Buffer.isBuffer(body)
    ? body
    : typeof body === 'string'
      ? Buffer.from(body, 'utf8')
      : Buffer.from(JSON.stringify(body) ?? 'null', 'utf8');
  const contentType = options.contentType ?? (isJson ? 'application/json' : undefined);
  const properties: Options.Publish = {
    ...options.properties,
    messageId,
    persistent: options.persistent ?? true,
    // The sender's trace context (W3C traceparent), unless the caller's headers set one.
    headers: { ...traceHeaders(), ...(options.headers ?? {}) },
    ...(contentType !== undefined ? { contentType } : {}),
  };
  const [exchange, routingKey] =
    'queue' in target ? ['', target.queue] : [target.exchange, target.routingKey];
  const publisher = ConfirmedPublisher.for(channel);
  for (let attempt = 0; ; attempt++) {
    try {
      await publisher.send(exchange, routingKey, content, properties, 'publish', options.timeoutMs);
      return messageId;
    } catch (error) {
      const final =
        attempt >= retries ||
        !publisher.open ||
        (error instanceof RabbitMqOperationError && error.replyCode === AMQP_NO_ROUTE);
      if (final) throw error;
      await new Promise((resolve) => setTimeout(resolve, retryDelayMs * 2 ** attempt));
    }
  }
}
