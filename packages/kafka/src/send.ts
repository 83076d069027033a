import { traceHeaders } from '@oncely/core';
import type { IHeaders, Producer, RecordMetadata } from 'kafkajs';
import type { RecordProducer } from './adapter/clientApi.js';
import { kafkajsRecordProducer } from './adapter/kafkajsProducer.js';
import { KafkaSendError } from './errors.js';

/** The header the consumer's default ID strategy reads. */
export const MESSAGE_ID_HEADER = 'message-id';

/** One record for {@link send}. */
export interface KafkaSendMessage {
  /**
   * Required: the stable message ID, written to the `message-id` header (where the
   * consumer's default ID strategy reads it). Reuse it when you send the same message
   * again: a new ID makes it a new message.
   */
  id: string;
  /** A Buffer or string is sent as is; anything else as JSON. */
  value: unknown;
  /**
   * The record key (partitioning, per-key order). `null` sends no key. @default the `id`
   * (all copies of one message land on one partition, in order)
   */
  key?: string | Buffer | null;
  /** Further headers; `message-id` is always the `id`. */
  headers?: IHeaders;
  /**
   * A fixed partition instead of the key's. A partition the topic does not have is refused
   * (KafkaSendError, not retried).
   */
  partition?: number;
}

/**
 * A `Producer` of @platformatic/kafka with its default (Buffer) serialisers, as
 * {@link send} and `createKafkaProducer` take it (only its shape is named here, so that
 * kafkajs users need not have @platformatic/kafka's types).
 */
export interface PlatformaticProducerLike {
  send(options: never): unknown;
  close(...args: never[]): unknown;
}

/** A connected kafkajs `Producer`, or a @platformatic/kafka `Producer`. */
export type KafkaProducerLike = Producer | PlatformaticProducerLike;

/** {@link send}'s options. */
export interface KafkaSendOptions {
  /**
   * Further attempts, with the same IDs, after a send kafkajs gave up on with a retriable
   * error (the broker may have written the first one: the consumer's marker absorbs the
   * duplicate; an idempotent producer avoids it within one producer session). @default 2
   */
  retries?: number;
  /** Pause before the first retry, doubled for each next one. @default 300 */
  retryDelayMs?: number;
  /**
   * How long the broker may wait for the in-sync replicas' acknowledgement (`acks: -1`).
   * On @platformatic/kafka (no per-send replica timeout) it bounds each attempt as a whole:
   * unanswered by then, it fails retriable (`REQUEST_TIMED_OUT`). @default 30000
   */
  timeoutMs?: number;
}

/**
 * The producer behind the client interface: kafkajs' has `sendBatch`, @platformatic/kafka's
 * is loaded (an optional peer) only when one is given.
 */
export async function recordProducerOf(producer: KafkaProducerLike): Promise<RecordProducer> {
  if (typeof (producer as { sendBatch?: unknown }).sendBatch === 'function') {
    return kafkajsRecordProducer(producer as Producer);
  }
  const { platformaticRecordProducer } = await import('./adapter/platformaticProducer.js');
  return platformaticRecordProducer(producer as never);
}

/**
 * Sends records so that an Oncely consumer can recognise duplicates: each gets the
 * `message-id` header (its `id`, required) and, unless given, the `id` as its key. Waits
 * for every in-sync replica (`acks: -1`) and retries retriable failures with the same IDs.
 * Rejects with {@link KafkaSendError} (code `KAFKA_SEND_FAILED`) without sending anything
 * when an ID is missing, or with the last error once the retries are spent.
 *
 * `producer` is a connected kafkajs `Producer` or a @platformatic/kafka `Producer`: the
 * records, keys, headers and partitions are the same on both (a key's partition is Java's
 * murmur2 on both, so per-key order holds when you switch), and so are the errors. Use a
 * producer created with `idempotent: true` where you can: it keeps the client's own
 * retries from writing a record twice.
 *
 * The active OpenTelemetry context goes along as `traceparent`/`tracestate` (see
 * docs/observability.md), so the consumer's span joins the sender's trace.
 *
 * @example
 * ```ts
 * const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
 * await producer.connect();
 * await send(producer, 'payments', { id: 'order-42', value: { orderId: 42, amount: 40 } });
 * ```
 */
export async function send(
  producer: KafkaProducerLike,
  topic: string,
  messages: KafkaSendMessage | readonly KafkaSendMessage[],
  options: KafkaSendOptions = {},
): Promise<RecordMetadata[]> {
  checkIds(messages);
  return sendRecords(await recordProducerOf(producer), topic, messages, options);
}

function checkIds(messages: KafkaSendMessage | readonly KafkaSendMessage[]): void {
  const list = Array.isArray(messages) ? messages : [messages as KafkaSendMessage];
  list.forEach((message, index) => {
    if (typeof message?.id !== 'string' || message.id.trim() === '') {
      throw new KafkaSendError(
        `message ${index} has no id: pass a stable ID (an order or event ID) and reuse it when you send again, so the consumer can recognise a duplicate`,
      );
    }
    const { partition } = message;
    // kafkajs resolves without writing a record of partition -1, and a fraction throws deep
    // inside either client: refused here, before anything is sent.
    if (partition !== undefined && !(Number.isSafeInteger(partition) && partition >= 0)) {
      throw new KafkaSendError(
        `message ${index} has partition ${String(partition)}: a partition is an integer from 0 (or leave it out for the key's partition)`,
      );
    }
  });
}

/** {@link send} on a producer behind the client interface (what the outbox producer uses too). */
export async function sendRecords(
  producer: RecordProducer,
  topic: string,
  messages: KafkaSendMessage | readonly KafkaSendMessage[],
  options: KafkaSendOptions = {},
): Promise<RecordMetadata[]> {
  checkIds(messages);
  const list = Array.isArray(messages) ? messages : [messages as KafkaSendMessage];
  const records = list.map((message) => ({
    key: message.key === undefined ? message.id : message.key,
    value: encode(message.value),
    // The sender's trace context (W3C traceparent), unless the caller's headers set one.
    headers: { ...traceHeaders(), ...(message.headers ?? {}), [MESSAGE_ID_HEADER]: message.id },
    ...(message.partition === undefined ? {} : { partition: message.partition }),
  }));
  const retries = options.retries ?? 2;
  const retryDelayMs = options.retryDelayMs ?? 300;
  for (let attempt = 0; ; attempt++) {
    try {
      return await producer.send(topic, records, { timeoutMs: options.timeoutMs ?? 30_000 });
    } catch (error) {
      if (attempt >= retries || !retriable(error)) {
        throw new KafkaSendError(`sending to '${topic}' failed: ${errorText(error)}`, { cause: error });
      }
      await new Promise((resolve) => setTimeout(resolve, retryDelayMs * 2 ** attempt));
    }
  }
}

function encode(value: unknown): Buffer | string {
  if (Buffer.isBuffer(value) || typeof value === 'string') return value;
  return JSON.stringify(value) ?? 'null';
}

function retriable(error: unknown): boolean {
  const e = error as { retriable?: unknown; name?: unknown; cause?: unknown } | null;
  if (!e) return false;
  // kafkajs' `retriable`; @platformatic/kafka's `canRetry` on an error without a Kafka error name.
  if (e.retriable === true || (e as { canRetry?: unknown }).canRetry === true) return true;
  if (e.name === 'KafkaJSNumberOfRetriesExceeded') return true;
  // @platformatic/kafka's retries spent ('initProducerId failed 3 times.'): an
  // AggregateError of what failed, network errors that can be retried among them.
  const inner = (e as { errors?: unknown }).errors;
  if (Array.isArray(inner) && inner.some((one) => one !== error && retriable(one))) return true;
  return e.cause !== undefined && e.cause !== error && retriable(e.cause);
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
