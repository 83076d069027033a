import type { Envelope } from '@oncely/core';
import type { IHeaders, KafkaMessage } from 'kafkajs';

/**
 * What `message.raw` holds for Kafka: the kafkajs record and where it came from.
 *
 * @example
 * ```ts
 * const { partition, message: record } = message.raw as KafkaRawRecord;
 * console.log(partition, record.offset, record.timestamp);
 * ```
 */
export interface KafkaRawRecord {
  topic: string;
  partition: number;
  message: KafkaMessage;
}

/**
 * Maps a kafkajs record to the core's envelope. The broker-assigned ID is
 * `topic/partition/offset`; the offset is also the sequence and what `offsets` mode
 * advances. Kafka keeps no delivery count, so none is set (the core counts attempts).
 *
 * @example
 * ```ts
 * const envelope = toEnvelope('orders', 3, message);
 * envelope.brokerMessageId; // 'orders/3/42'
 * ```
 */
export function toEnvelope(topic: string, partition: number, message: KafkaMessage): Envelope {
  const raw: KafkaRawRecord = { topic, partition, message };
  const envelope: Envelope = {
    body: message.value,
    attributes: headersToAttributes(message.headers),
    brokerMessageId: `${topic}/${partition}/${message.offset}`,
    sequence: message.offset,
    source: topic,
    offset: { topic, partition, offset: message.offset },
    raw,
  };
  if (message.key !== null && message.key !== undefined) envelope.orderingKey = message.key.toString('utf8');
  return envelope;
}

/**
 * Record headers as strings. Kafka allows a header name more than once; the last value
 * wins, as with `Headers.lastHeader()` in the Java client.
 *
 * @example
 * ```ts
 * headersToAttributes({ 'message-id': Buffer.from('m-1') }); // { 'message-id': 'm-1' }
 * ```
 */
export function headersToAttributes(headers: IHeaders | undefined): Record<string, string> {
  const attributes: Record<string, string> = {};
  if (!headers) return attributes;
  for (const [name, value] of Object.entries(headers)) {
    const last = Array.isArray(value) ? value[value.length - 1] : value;
    if (last === undefined || last === null) continue;
    attributes[name] = typeof last === 'string' ? last : last.toString('utf8');
  }
  return attributes;
}
