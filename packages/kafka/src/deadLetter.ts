import type { DeadLetterReason } from '@oncely/core';
import type { IHeaders, KafkaMessage, Message } from 'kafkajs';

/**
 * Header names Oncely adds to a dead-lettered record.
 *
 * @example
 * ```ts
 * const reason = record.headers?.[DEAD_LETTER_HEADERS.reason]?.toString(); // 'max-attempts'
 * ```
 */
export const DEAD_LETTER_HEADERS = {
  reason: 'oncely-dead-letter-reason',
  detail: 'oncely-dead-letter-detail',
  consumer: 'oncely-consumer',
  topic: 'oncely-original-topic',
  partition: 'oncely-original-partition',
  offset: 'oncely-original-offset',
  timestamp: 'oncely-dead-lettered-at',
  /** Set when the dead-letter topic refused the record as too large: the value was left out. */
  valueDropped: 'oncely-dead-letter-value-dropped',
  /** Failed attempts before it was dead-lettered (absent when the message had no ID). */
  attempts: 'oncely-dead-letter-attempts',
  /**
   * On a record `oncely dlq replay` re-sent to the source: `<dlq>/<partition>/<offset>#<fingerprint>`
   * of the dead letter it copies, so a pass that died mid-send finds what it sent.
   */
  replayOf: 'oncely-replay-of',
} as const;

/** Longest `detail` header kept: error messages can be large, a header should not be. */
const MAX_DETAIL = 2000;

/**
 * Builds the record produced to the dead-letter topic: the original key, value and
 * headers, plus the reason and where the record came from.
 *
 * @example
 * ```ts
 * const record = deadLetterRecord({ topic: 'orders', partition: 0, message, consumer: 'c', reason: 'max-attempts', detail: 'boom' });
 * await producer.send({ topic: 'orders.dlq', messages: [record] });
 * ```
 */
export function deadLetterRecord(input: {
  topic: string;
  partition: number;
  message: KafkaMessage;
  consumer: string;
  reason: DeadLetterReason;
  detail: string;
  /** The attempts made (the core's count); absent when unknown. */
  attempts?: number;
}): Message {
  const { topic, partition, message, consumer, reason, detail, attempts } = input;
  const headers: IHeaders = { ...(message.headers ?? {}) };
  headers[DEAD_LETTER_HEADERS.reason] = reason;
  headers[DEAD_LETTER_HEADERS.detail] =
    detail.length > MAX_DETAIL ? `${detail.slice(0, MAX_DETAIL)}…` : detail;
  headers[DEAD_LETTER_HEADERS.consumer] = consumer;
  headers[DEAD_LETTER_HEADERS.topic] = topic;
  headers[DEAD_LETTER_HEADERS.partition] = String(partition);
  headers[DEAD_LETTER_HEADERS.offset] = message.offset;
  headers[DEAD_LETTER_HEADERS.timestamp] = new Date().toISOString();
  if (attempts !== undefined) headers[DEAD_LETTER_HEADERS.attempts] = String(attempts);
  return { key: message.key, value: message.value, headers, timestamp: message.timestamp };
}
