import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import type { ChannelModel, ConfirmChannel } from 'amqplib';
import type { PublishTarget } from './publish.js';
import { publish } from './publish.js';

/**
 * Options of {@link createRabbitMqProducer}: your confirm channel, or a URL the producer
 * connects to (and reconnects to after the channel closes).
 *
 * @example
 * ```ts
 * createRabbitMqProducer({ url: process.env.RABBITMQ_URL, target: (m) => ({ exchange: 'events', routingKey: m.destination }) });
 * ```
 */
export interface RabbitMqProducerOptions {
  /** Your confirm channel; the producer never closes it. */
  channel?: ConfirmChannel;
  /** `amqp://user:password@host:5672`: the producer opens (and closes) its own connection. */
  url?: string;
  /**
   * Where a message goes. @default `{ queue: message.destination }` (the default exchange)
   */
  target?: (message: OutboxMessage) => PublishTarget;
  /** How long to wait for each publisher confirm. @default 30000 */
  timeoutMs?: number;
}

/**
 * The outbox producer for RabbitMQ: publishes on a confirm channel, each message with the
 * row's ID as `properties.messageId` (what the RabbitMQ consumer's default ID strategy
 * reads) and its attributes as headers, `mandatory` so an unroutable message fails
 * instead of vanishing. A message counts as sent once the broker confirmed it. Messages
 * of one call are published together and confirmed one by one (the relay never puts two
 * messages of one key in one call).
 *
 * @example
 * ```ts
 * import { createRelay } from '@oncely/postgres';
 * import { createRabbitMqProducer } from '@oncely/rabbitmq';
 *
 * const producer = createRabbitMqProducer({ url: process.env.RABBITMQ_URL });
 * const relay = createRelay({ store, producers: producer });
 * await relay.start();
 * // ... on shutdown
 * await relay.stop();
 * await producer.close();
 * ```
 */
export function createRabbitMqProducer(
  options: RabbitMqProducerOptions,
): OutboxProducer & { close(): Promise<void> } {
  if (typeof options !== 'object' || options === null)
    throw new ConfigError('producer', 'options are required');
  const { channel: given, url } = options;
  if ((given === undefined) === (url === undefined)) {
    throw new ConfigError('producer', 'needs exactly one of channel or url');
  }
  if (url !== undefined && (typeof url !== 'string' || url === '')) {
    throw new ConfigError('url', 'must be a non-empty amqp:// URL');
  }
  const target =
    options.target ?? ((message: OutboxMessage): PublishTarget => ({ queue: message.destination }));
  let connection: Promise<{ model: ChannelModel; channel: ConfirmChannel }> | undefined;
  let closed = false;

  async function channel(): Promise<ConfirmChannel> {
    if (given) return given;
    connection ??= (async () => {
      const amqp = await import('amqplib');
      const model = await amqp.connect(url!);
      model.on('error', () => {});
      const channel = await model.createConfirmChannel();
      channel.on('error', () => {});
      const reset = () => {
        connection = undefined;
      };
      channel.on('close', reset);
      model.on('close', reset);
      return { model, channel };
    })();
    try {
      return (await connection).channel;
    } catch (error) {
      connection = undefined;
      throw error;
    }
  }

  return {
    async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      if (closed) throw new ConfigError('producer', 'is closed');
      const ch = await channel();
      return Promise.all(
        messages.map(async (message): Promise<OutboxSendResult> => {
          try {
            await publish(ch, target(message), Buffer.from(message.body), {
              messageId: message.id,
              headers: { ...message.attributes },
              retries: 0,
              ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
            });
            return { ok: true };
          } catch (error) {
            return { ok: false, error };
          }
        }),
      );
    },
    async close(): Promise<void> {
      closed = true;
      const open = connection;
      connection = undefined;
      if (!open) return;
      const { model } = await open.catch(() => ({ model: undefined }));
      await model?.close().catch(() => {});
    },
  };
}
