import { traceHeaders } from '@oncely/core';
import type { IHeaders, Producer, RecordMetadata } from 'kafkajs';
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
  /** A fixed partition instead of the producer's partitioner. */
  partition?: number;
}

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
  /** How long the broker may wait for the in-sync replicas' acknowledgement (`acks: -1`). @default 30000 */
  timeoutMs?: number;
}

/**
 * Sends records so that an Oncely consumer can recognise duplicates: each gets the
 * `message-id` header (its `id`, required) and, unless given, the `id` as its key. Waits
 * for every in-sync replica (`acks: -1`) and retries retriable failures with the same IDs.
 * Rejects with {@link KafkaSendError} (code `KAFKA_SEND_FAILED`) without sending anything
 * when an ID is missing, or with the last error once the retries are spent.
 *
 * Use a producer created with `idempotent: true` where you can: it keeps kafkajs' own
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
  producer: Producer,
  topic: string,
  messages: KafkaSendMessage | readonly KafkaSendMessage[],
  options: KafkaSendOptions = {},
): Promise<RecordMetadata[]> {
  const list = Array.isArray(messages) ? messages : [messages as KafkaSendMessage];
  list.forEach((message, index) => {
    if (typeof message?.id !== 'string' || message.id.trim() === '') {
      throw new KafkaSendError(
        `message ${index} has no id: pass a stable ID (an order or event ID) and reuse it when you send again, so the consumer can recognise a duplicate`,
      );
    }
  });
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
      return await producer.send({
        topic,
        acks: -1,
        timeout: options.timeoutMs ?? 30_000,
        messages: records,
      });
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
  if (e.retriable === true || e.name === 'KafkaJSNumberOfRetriesExceeded') return true;
  return e.cause !== undefined && e.cause !== error && retriable(e.cause);
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
