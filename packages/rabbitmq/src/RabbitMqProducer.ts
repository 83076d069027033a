import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import type { ChannelModel, ConfirmChannel } from 'amqplib';
import { closeQuietly } from './closeQuietly.js';
import { AMQP_ACCESS_REFUSED, amqpReplyCode, RabbitMqOperationError } from './errors.js';
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
  /** The connection's `connection_name` (what the management UI shows). @default 'oncely-producer' */
  connectionName?: string;
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
  // One connection; one confirm channel per exchange on it. A channel error (a missing
  // exchange: 404) closes only its channel, so it fails only that exchange's messages;
  // the next send opens a new channel on the same connection (none is leaked).
  let model: Promise<ChannelModel> | undefined;
  const channels = new Map<string, Promise<ConfirmChannel>>();
  // Why the broker closed a channel (its 'error' comes just before 'close'): amqplib fails
  // the unconfirmed publishes with a bare "channel closed", the broker's reason (404
  // NOT_FOUND - no exchange ...) is what the row's last error must say.
  const closeReasons = new WeakMap<ConfirmChannel, unknown>();
  let closed = false;

  function connect(): Promise<ChannelModel> {
    model ??= (async () => {
      const amqp = await import('amqplib');
      const opened = await amqp.connect(url!, {
        clientProperties: { connection_name: options.connectionName ?? 'oncely-producer' },
      });
      opened.on('error', () => {});
      opened.on('close', () => {
        model = undefined;
        channels.clear();
      });
      return opened;
    })().catch((error) => {
      model = undefined;
      throw error;
    });
    return model;
  }

  function channel(exchange: string): Promise<ConfirmChannel> {
    if (given) return Promise.resolve(given);
    let open = channels.get(exchange);
    if (!open) {
      open = (async () => {
        const ch = await (await connect()).createConfirmChannel();
        ch.on('error', (error: unknown) => closeReasons.set(ch, error));
        ch.on('close', () => {
          if (channels.get(exchange) === open) channels.delete(exchange);
        });
        return ch;
      })();
      const opening = open;
      opening.catch(() => {
        if (channels.get(exchange) === opening) channels.delete(exchange);
      });
      channels.set(exchange, open);
    }
    return open;
  }

  // The broker's max_message_size, once a message over it closed a channel (RabbitMQ says
  // it only then, in the 406): later messages over it fail before publishing.
  let maxBodyBytes: number | undefined;

  /** One message; `beside` when it failed only because a message over the size closed its channel. */
  async function sendOne(message: OutboxMessage): Promise<{ result: OutboxSendResult; beside?: boolean }> {
    const tooLong = overAmqpLimits(message) ?? overSize(message, maxBodyBytes);
    if (tooLong) return { result: { ok: false, error: tooLong, permanent: true } };
    let ch: ConfirmChannel | undefined;
    try {
      const where = target(message);
      const keyTooLong = overRoutingLimits(where);
      if (keyTooLong) return { result: { ok: false, error: keyTooLong, permanent: true } };
      ch = await channel('exchange' in where ? where.exchange : '');
      await publish(ch, where, Buffer.from(message.body), {
        messageId: message.id,
        headers: { ...message.attributes },
        retries: 0,
        ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      });
      return { result: { ok: true } };
    } catch (caught) {
      const reason = ch ? closeReasons.get(ch) : undefined;
      const error = withCloseReason(caught, reason);
      const max = brokerMaxSize(reason);
      if (max !== undefined) {
        maxBodyBytes = max;
        // The 406 closes the whole channel: only the message over the size is at fault.
        if (message.body.byteLength > max) return { result: { ok: false, error, permanent: true } };
        return { result: { ok: false, error }, beside: true };
      }
      // No permission is a setting no retry fixes; a missing exchange may be
      // declared later, so it is retried (then dead-lettered) like other failures.
      return {
        result:
          amqpReplyCode(error) === AMQP_ACCESS_REFUSED
            ? { ok: false, error, permanent: true }
            : { ok: false, error },
      };
    }
  }

  return {
    async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      if (closed) throw new ConfigError('producer', 'is closed');
      const outcomes = await Promise.all(messages.map(sendOne));
      // Messages that failed only beside one over the broker's max size are published again
      // once, on a new channel (the size is known now, so none over it goes with them):
      // otherwise every retry of the big one failed them too, until they were dead-lettered.
      const again = outcomes.flatMap((outcome, i) => (outcome.beside ? [i] : []));
      const retried = await Promise.all(again.map((i) => sendOne(messages[i]!)));
      again.forEach((i, n) => {
        outcomes[i] = retried[n]!;
      });
      return outcomes.map((outcome) => outcome.result);
    },
    async close(): Promise<void> {
      closed = true;
      const open = model;
      model = undefined;
      channels.clear();
      if (!open) return;
      const opened = await open.catch(() => undefined);
      if (opened) await closeQuietly(opened);
    },
  };
}

/** AMQP short strings (`properties.messageId`, header names) hold at most 255 bytes. */
const AMQP_SHORTSTR_MAX_BYTES = 255;

/**
 * A message the broker could never take, found before publishing: an ID or an attribute
 * name over 255 bytes would make amqplib refuse the frame on every attempt, so the row
 * fails once, permanently, with the reason (not `maxAttempts` transient failures).
 */
function overAmqpLimits(message: OutboxMessage): RabbitMqOperationError | undefined {
  const idBytes = Buffer.byteLength(message.id, 'utf8');
  if (idBytes > AMQP_SHORTSTR_MAX_BYTES) {
    return new RabbitMqOperationError(
      'publish',
      `message ID is ${idBytes} bytes; AMQP caps properties.messageId at ${AMQP_SHORTSTR_MAX_BYTES} bytes (use a shorter ID)`,
    );
  }
  for (const name of Object.keys(message.attributes ?? {})) {
    const nameBytes = Buffer.byteLength(name, 'utf8');
    if (nameBytes > AMQP_SHORTSTR_MAX_BYTES) {
      return new RabbitMqOperationError(
        'publish',
        `attribute name '${name.slice(0, 40)}...' is ${nameBytes} bytes; AMQP caps header names at ${AMQP_SHORTSTR_MAX_BYTES} bytes`,
      );
    }
  }
  return undefined;
}

/** A queue, exchange or routing key over 255 bytes: amqplib refuses the frame every time. */
function overRoutingLimits(where: PublishTarget): RabbitMqOperationError | undefined {
  const names: Array<[string, string]> =
    'queue' in where
      ? [['queue', where.queue]]
      : [
          ['exchange', where.exchange],
          ['routing key', where.routingKey],
        ];
  for (const [what, name] of names) {
    const bytes = Buffer.byteLength(String(name), 'utf8');
    if (bytes > AMQP_SHORTSTR_MAX_BYTES) {
      return new RabbitMqOperationError(
        'publish',
        `${what} '${String(name).slice(0, 40)}...' is ${bytes} bytes; AMQP caps it at ${AMQP_SHORTSTR_MAX_BYTES} bytes`,
      );
    }
  }
  return undefined;
}

function overSize(message: OutboxMessage, maxBytes: number | undefined): RabbitMqOperationError | undefined {
  if (maxBytes === undefined || message.body.byteLength <= maxBytes) return undefined;
  return new RabbitMqOperationError(
    'publish',
    `message body is ${message.body.byteLength} bytes; the broker refuses messages over ${maxBytes} bytes (its max_message_size)`,
  );
}

/** The broker's max size from its 406 "message size N is larger than configured max size M". */
function brokerMaxSize(reason: unknown): number | undefined {
  if (!(reason instanceof Error)) return undefined;
  const match = /message size \d+ is larger than configured max size (\d+)/.exec(reason.message);
  return match ? Number(match[1]) : undefined;
}

/**
 * A publish that failed because the broker closed its channel carries the broker's
 * reason (reply code and text) instead of amqplib's bare "channel closed".
 */
function withCloseReason(error: unknown, reason: unknown): unknown {
  if (!(reason instanceof Error) || error === reason) return error;
  const code = amqpReplyCode(reason);
  return new RabbitMqOperationError('publish', `the broker closed the channel: ${reason.message}`, code, {
    cause: error,
  });
}
