import { randomUUID } from 'node:crypto';
import type { ConfirmChannel, Options } from 'amqplib';
import { ConfirmedPublisher } from './ConfirmedPublisher.js';

/** Where {@link publish} sends: straight to a queue, or to an exchange with a routing key. */
export type PublishTarget = { queue: string } | { exchange: string; routingKey: string };

export interface PublishOptions {
  /**
   * The message's stable ID (`properties.messageId`), the consumer's default ID. Pass
   * your business ID (order ID, event ID) and reuse it when you retry a publish: a new
   * ID makes the retry a new message. @default a random UUID (returned)
   */
  messageId?: string;
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
 * the broker confirmed it. Rejects (`RabbitMqOperationError`) when the broker nacks it,
 * when no queue is bound to receive it (published `mandatory`: a bare confirm would
 * acknowledge a dropped message), or when no confirm arrives in time — after which a
 * retry may duplicate the message, which an Oncely consumer absorbs as long as the retry
 * keeps the same `messageId`.
 *
 * Bodies: a Buffer is sent as is, a string as UTF-8, anything else as JSON.
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
  options: PublishOptions = {},
): Promise<string> {
  const messageId = options.messageId ?? randomUUID();
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
    headers: options.headers ?? {},
    ...(contentType !== undefined ? { contentType } : {}),
  };
  const [exchange, routingKey] =
    'queue' in target ? ['', target.queue] : [target.exchange, target.routingKey];
  await ConfirmedPublisher.for(channel).send(
    exchange,
    routingKey,
    content,
    properties,
    'publish',
    options.timeoutMs,
  );
  return messageId;
}
