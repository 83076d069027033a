import type { ConsumerConfig, DeadLetterSession, HeldDeadLetter } from '@oncely/core';
import { type ChannelModel, type ConfirmChannel, connect, type GetMessage } from 'amqplib';
import { ConfirmedPublisher } from './ConfirmedPublisher.js';
import { closeQuietly } from './closeQuietly.js';
import {
  ATTEMPTS_HEADER,
  CONSUMER_HEADER,
  copyHeaders,
  DEAD_LETTERED_AT_HEADER,
  DETAIL_HEADER,
  REASON_HEADER,
  SOURCE_QUEUE_HEADER,
  stringifyHeaders,
} from './envelope.js';
import { RabbitMqOperationError } from './errors.js';
import { parseBrokerOptions, type ResolvedOptions } from './options.js';
import { copyProperties } from './RabbitMqAdapter.js';

/** Headers a dead letter carries that a replayed message must not (it starts afresh). */
const DEAD_LETTER_HEADERS = [
  REASON_HEADER,
  DETAIL_HEADER,
  ATTEMPTS_HEADER,
  CONSUMER_HEADER,
  SOURCE_QUEUE_HEADER,
  DEAD_LETTERED_AT_HEADER,
];

/** The held copy behind a {@link HeldDeadLetter}. */
interface RabbitHeld extends HeldDeadLetter {
  readonly msg: GetMessage;
}

/**
 * Opens a pass over the consumer's dead-letter queue (`broker.deadLetterQueue`, default
 * `${queue}.dlq`) for `DeadLetters` / `oncely dlq`.
 *
 * Strategy: `read()` takes every message with `basic.get` (no ack) on one confirm channel
 * and holds them all unacked; `replay` publishes a copy to the work queue through the
 * default exchange (confirmed, mandatory), then acks the held one; `remove` acks it;
 * `close()` nacks the rest with requeue in one `basic.nack multiple`. Nothing is lost when
 * the process dies: the connection closes and the broker requeues every unacked message.
 *
 * Limits: the pass holds the whole DLQ in memory and unacked; a classic queue puts
 * requeued messages back in their original positions, a quorum queue counts each requeue
 * in `x-delivery-count` (RabbitMQ 4.0 to 4.2 apply a default delivery limit of 20 to
 * quorum queues: list a quorum DLQ that often and its messages are dropped, so give
 * quorum DLQs `x-delivery-limit: -1` there). While a pass runs, another reader of the DLQ
 * sees only what the pass has not taken.
 *
 * @example
 * ```ts
 * const session = await openDeadLetters({ name: 'payments', broker: { type: 'rabbitmq', url, queue: 'payments' }, store, handler });
 * const letters = await session.read();
 * await session.close(); // all back, in order
 * ```
 */
export async function openDeadLetters(config: ConsumerConfig<any, any>): Promise<DeadLetterSession> {
  const options = parseBrokerOptions(config.broker as unknown as Record<string, unknown>);
  const connection = await connectAny(options, `oncely-dlq:${config.name}`);
  let channel: ConfirmChannel;
  try {
    channel = await connection.createConfirmChannel();
    channel.on('error', () => {});
    await channel.checkQueue(options.deadLetterQueue);
  } catch (error) {
    await closeQuietly(connection);
    throw new RabbitMqOperationError(
      'dead letters',
      `cannot open dead-letter queue '${options.deadLetterQueue}' (${errorText(error)})`,
      undefined,
      { cause: error },
    );
  }
  return new RabbitDeadLetterSession(options, connection, channel);
}

class RabbitDeadLetterSession implements DeadLetterSession {
  readonly defaultIdStrategy = 'producer' as const;
  private readonly publisher: ConfirmedPublisher;

  constructor(
    private readonly options: ResolvedOptions,
    private readonly connection: ChannelModel,
    private readonly channel: ConfirmChannel,
  ) {
    this.publisher = ConfirmedPublisher.for(channel);
  }

  get name(): string {
    return this.options.deadLetterQueue;
  }

  async read(): Promise<HeldDeadLetter[]> {
    const held: RabbitHeld[] = [];
    for (;;) {
      const msg = await this.channel.get(this.options.deadLetterQueue, { noAck: false });
      if (msg === false) return held;
      held.push(describe(msg));
    }
  }

  async replay(letter: HeldDeadLetter): Promise<void> {
    const { msg } = letter as RabbitHeld;
    const headers = copyHeaders(msg, {});
    for (const name of DEAD_LETTER_HEADERS) delete headers[name];
    await this.publisher.send(
      '',
      this.options.queue,
      msg.content,
      copyProperties(msg, headers),
      'dead-letter replay',
      this.options.confirmTimeoutMs,
    );
    // Only now: the broker has the copy in the work queue.
    this.channel.ack(msg);
  }

  async remove(letter: HeldDeadLetter): Promise<void> {
    this.channel.ack((letter as RabbitHeld).msg);
  }

  async close(): Promise<void> {
    try {
      // One basic.nack (multiple, requeue) for everything still held; the broker puts them
      // back in their positions (classic queues). Closing the channel would do the same.
      this.channel.nackAll(true);
    } catch {
      // The channel is already gone (a failed publish or a dropped connection closed it):
      // the broker requeued everything it held, which is what the nack would have done.
    }
    // Waits for the broker to have taken the acks and nacks before the connection goes,
    // or for the connection's end (then the broker requeues what was held).
    await closeQuietly(this.channel);
    await closeQuietly(this.connection);
  }
}

function describe(msg: GetMessage): RabbitHeld {
  const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
  const attributes = stringifyHeaders(headers, []);
  const death = oldestDeath(headers['x-death']);
  const deadLetteredAt = Number(headers[DEAD_LETTERED_AT_HEADER]);
  const attempts = Number(headers[ATTEMPTS_HEADER]);
  const messageId = msg.properties.messageId;
  return {
    msg,
    envelope: {
      body: msg.content,
      attributes: Object.fromEntries(
        Object.entries(attributes).filter(([name]) => !DEAD_LETTER_HEADERS.includes(name)),
      ),
      producerMessageId: typeof messageId === 'string' && messageId !== '' ? messageId : undefined,
    },
    // A message the broker itself dead-lettered (a length limit, a quorum delivery limit) has no reason header.
    reason: attributes[REASON_HEADER] ?? (death ? `broker-${death.reason}` : 'unknown'),
    ...(attributes[DETAIL_HEADER] !== undefined ? { error: attributes[DETAIL_HEADER] } : {}),
    ...(Number.isFinite(attempts) && attempts > 0 ? { attempts } : {}),
    ...(Number.isFinite(deadLetteredAt) && deadLetteredAt > 0
      ? { lastFailedAt: new Date(deadLetteredAt) }
      : death?.time
        ? { lastFailedAt: death.time }
        : {}),
  };
}

/** The oldest `x-death` entry: why and when the broker dead-lettered it. */
function oldestDeath(value: unknown): { reason: string; time?: Date } | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const last = value[value.length - 1] as { reason?: unknown; time?: unknown };
  const reason =
    typeof last.reason === 'string'
      ? last.reason
      : Buffer.isBuffer(last.reason)
        ? last.reason.toString()
        : 'dead-lettered';
  const time = last.time as { value?: number } | Date | number | undefined;
  const seconds =
    typeof time === 'number' ? time : time instanceof Date ? time.getTime() / 1000 : time?.value;
  return { reason, ...(typeof seconds === 'number' ? { time: new Date(seconds * 1000) } : {}) };
}

async function connectAny(options: ResolvedOptions, connectionName: string): Promise<ChannelModel> {
  const refused: string[] = [];
  for (const url of options.urls) {
    try {
      const connection = await connect(url, {
        ...options.socketOptions,
        clientProperties: { connection_name: connectionName },
      });
      connection.on('error', () => {});
      return connection;
    } catch (error) {
      refused.push(errorText(error));
    }
  }
  throw new RabbitMqOperationError('dead letters', `cannot connect to RabbitMQ: ${refused.join('; ')}`);
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
