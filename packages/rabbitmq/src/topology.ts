import type { Channel, Options } from 'amqplib';
import { parseTopology, type RabbitMqTopologyOptions, type ResolvedTopology } from './options.js';

/** What {@link assertTopology} declared. */
export interface RabbitMqTopology {
  queue: string;
  deadLetterExchange: string;
  deadLetterQueue: string;
  deadLetterRoutingKey: string;
  /** Delay queues declared up front (from `retryDelaysMs`); others are declared on demand. */
  delayQueues: string[];
}

/**
 * Unused on-demand delay queues are deleted by the broker after their delay plus this.
 * Every retry re-declares its queue first, which renews the expiry, so a queue cannot
 * expire while it still holds a copy (each copy leaves after at most the queue's TTL).
 *
 * @example
 * ```ts
 * delayQueueOptions(topology, 2000).arguments['x-expires']; // 2000 + DELAY_QUEUE_IDLE_EXPIRY_MS
 * ```
 */
export const DELAY_QUEUE_IDLE_EXPIRY_MS = 15 * 60_000;

/**
 * The delay ladder used when `retryDelaysMs` is not set: every delay is rounded up to
 * `m × 10^k` for these `m`, so jittered backoffs share a bounded number of queues (at most
 * a third longer than asked).
 */
const LADDER = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8] as const;
const MIN_DELAY_MS = 10;
/** RabbitMQ's `x-message-ttl` maximum (2^32 - 1 ms is allowed; stay well inside an int32). */
const MAX_DELAY_MS = 2 ** 31 - 1;

/**
 * Declares the work queue, the dead-letter exchange and queue, and the delay queues for
 * `retryDelaysMs`. Idempotent; fails with a 406 PRECONDITION_FAILED channel error (which
 * closes `channel`) when a queue exists with different arguments.
 *
 * The work queue gets `x-dead-letter-exchange` pointing at the dead-letter exchange, so
 * what the broker itself dead-letters (a quorum queue's delivery limit, a length limit)
 * lands in the same place, without Oncely's reason headers.
 *
 * @example
 * ```ts
 * const connection = await amqp.connect(process.env.RABBITMQ_URL);
 * const channel = await connection.createChannel();
 * await assertTopology(channel, { queue: 'payments', queueType: 'quorum', deliveryLimit: 50, retryDelaysMs: [1000, 10000, 60000] });
 * ```
 */
export async function assertTopology(
  channel: Channel,
  options: RabbitMqTopologyOptions,
): Promise<RabbitMqTopology> {
  const topology = parseTopology(options as unknown as Record<string, unknown>);
  return declareTopology(channel, topology);
}

/**
 * {@link assertTopology} on already-resolved options.
 *
 * @example
 * ```ts
 * await declareTopology(channel, parseTopology({ queue: 'payments' }));
 * ```
 */
export async function declareTopology(
  channel: Channel,
  topology: ResolvedTopology,
): Promise<RabbitMqTopology> {
  await channel.assertExchange(topology.deadLetterExchange, 'direct', { durable: true });
  await channel.assertQueue(topology.deadLetterQueue, {
    durable: true,
    arguments: { 'x-queue-type': topology.queueType },
  });
  await channel.bindQueue(
    topology.deadLetterQueue,
    topology.deadLetterExchange,
    topology.deadLetterRoutingKey,
  );
  await channel.assertQueue(topology.queue, workQueueOptions(topology));
  for (const binding of topology.bindings) {
    await channel.assertExchange(binding.exchange, binding.type ?? 'topic', { durable: true });
    await channel.bindQueue(topology.queue, binding.exchange, binding.routingKey ?? '', binding.arguments);
  }
  const delayQueues: string[] = [];
  for (const delay of topology.retryDelaysMs ?? []) {
    const name = delayQueueName(topology.queue, delay);
    await channel.assertQueue(name, delayQueueOptions(topology, delay));
    delayQueues.push(name);
  }
  return {
    queue: topology.queue,
    deadLetterExchange: topology.deadLetterExchange,
    deadLetterQueue: topology.deadLetterQueue,
    deadLetterRoutingKey: topology.deadLetterRoutingKey,
    delayQueues,
  };
}

/**
 * Declaration of the work queue: type, dead-letter exchange and routing key, delivery
 * limit, extra arguments.
 *
 * @example
 * ```ts
 * await channel.assertQueue('payments', workQueueOptions(parseTopology({ queue: 'payments', queueType: 'quorum' })));
 * ```
 */
export function workQueueOptions(topology: ResolvedTopology): Options.AssertQueue {
  return {
    durable: true,
    arguments: {
      'x-queue-type': topology.queueType,
      'x-dead-letter-exchange': topology.deadLetterExchange,
      'x-dead-letter-routing-key': topology.deadLetterRoutingKey,
      ...(topology.deliveryLimit !== undefined ? { 'x-delivery-limit': topology.deliveryLimit } : {}),
      ...(topology.singleActiveConsumer ? { 'x-single-active-consumer': true } : {}),
      ...topology.queueArguments,
    },
  };
}

/**
 * Name of the delay queue holding retry copies for `delayMs` before they return to `queue`.
 *
 * @example
 * ```ts
 * delayQueueName('payments', 2000); // 'payments.delay.2000'
 * ```
 */
export function delayQueueName(queue: string, delayMs: number): string {
  return `${queue}.delay.${delayMs}`;
}

/**
 * Declaration of one delay queue: every copy waits `delayMs` (`x-message-ttl`), then the
 * broker dead-letters it through the default exchange back to the work queue. Quorum
 * delay queues use at-least-once dead-lettering, so a broker crash at expiry cannot lose
 * the copy; classic queues dead-letter at most once.
 *
 * @example
 * ```ts
 * await channel.assertQueue(delayQueueName('payments', 2000), delayQueueOptions(parseTopology({ queue: 'payments' }), 2000));
 * ```
 */
export function delayQueueOptions(topology: ResolvedTopology, delayMs: number): Options.AssertQueue {
  const onDemand = topology.retryDelaysMs === undefined;
  return {
    durable: true,
    arguments: {
      'x-queue-type': topology.queueType,
      'x-message-ttl': delayMs,
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': topology.queue,
      ...(topology.queueType === 'quorum'
        ? { 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' }
        : {}),
      ...(onDemand ? { 'x-expires': delayMs + DELAY_QUEUE_IDLE_EXPIRY_MS } : {}),
    },
  };
}

/**
 * The delay a retry actually waits: `delayMs` rounded up to the next configured delay
 * (the largest when none is long enough), or to the default ladder. 0 when no delay is
 * wanted (the copy goes straight back to the work queue).
 *
 * @example
 * ```ts
 * retryDelayBucket(1100, undefined);     // 1200
 * retryDelayBucket(1100, [1000, 5000]);  // 5000
 * ```
 */
export function retryDelayBucket(delayMs: number, configured: readonly number[] | undefined): number {
  if (!(delayMs > 0)) return 0;
  if (configured && configured.length > 0) {
    return configured.find((delay) => delay >= delayMs) ?? configured[configured.length - 1]!;
  }
  const wanted = Math.min(Math.max(Math.ceil(delayMs), MIN_DELAY_MS), MAX_DELAY_MS);
  for (let scale = 1; scale <= MAX_DELAY_MS; scale *= 10) {
    for (const step of LADDER) {
      const candidate = Math.round(step * scale);
      if (candidate >= wanted) return Math.min(candidate, MAX_DELAY_MS);
    }
  }
  return MAX_DELAY_MS;
}
