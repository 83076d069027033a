import { randomUUID } from 'node:crypto';
import {
  type ConsumerConfig,
  type DeadLetterCopy,
  type IdStrategy,
  OncelyError,
  resolveMessageId,
} from '@oncely/core';
import type { Admin, Consumer, KafkaMessage } from 'kafkajs';
import { defaultMessageId, toolClient } from './client.js';
import { resolveKafkaConfig } from './config.js';
import { DEAD_LETTER_HEADERS } from './deadLetter.js';
import { headersToAttributes, toEnvelope } from './envelope.js';

/** Most dead letters read per call: reading is cheap, but a huge topic is not scanned whole. */
const MAX_SCANNED = 100_000;
/** How long the scan may take (joining a group included) before it gives up. */
const SCAN_TIMEOUT_MS = 60_000;

/**
 * The copies of `messageId` this consumer dead-lettered, read from its dead-letter topic
 * (`broker.deadLetterTopic`, default `<topic>.dlq`) without consuming them: from each
 * partition's first offset to the end it had when the call started, in a throwaway
 * consumer group that commits nothing and is deleted afterwards. Records another consumer
 * dead-lettered to the same topic (header `oncely-consumer`) are left out. The ID is
 * resolved as the consumer resolved it: with the consumer's ID strategy, on the original
 * topic, partition and offset the record's headers carry. What `oncely inspect` shows for
 * a message without a marker. Scans at most 100,000 dead letters.
 *
 * @example
 * ```ts
 * const copies = await findDeadLetters({ name: 'payments', broker: { type: 'kafka', brokers: ['localhost:9092'], topic: 'payments' }, store, handler }, 'order-42');
 * // [{ reason: 'max-attempts', description: 'card declined', enqueuedAt: 2026-... }]
 * ```
 */
export async function findDeadLetters(
  config: ConsumerConfig<any, any>,
  messageId: string,
): Promise<DeadLetterCopy[]> {
  const resolved = resolveKafkaConfig(config.broker, config.name);
  const { deadLetterTopic } = resolved;
  const kafka = toolClient(resolved, 'inspect');
  const strategy: IdStrategy = config.idStrategy ?? ((envelope) => defaultMessageId(envelope, config.mode));
  const admin = kafka.admin();
  await admin.connect();
  const groupId = `${resolved.groupId}-inspect-${randomUUID()}`;
  let consumer: Consumer | undefined;
  try {
    if (!(await admin.listTopics()).includes(deadLetterTopic)) return [];
    const ends = await untilEnds(admin, deadLetterTopic);
    if (ends.size === 0) return [];
    consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false });
    return await scan(consumer, deadLetterTopic, ends, (message) =>
      copyOf(message, config.name, strategy, messageId),
    );
  } finally {
    await consumer?.disconnect().catch(() => {});
    if (consumer) await admin.deleteGroups([groupId]).catch(() => {});
    await admin.disconnect().catch(() => {});
  }
}

/** Each non-empty partition's end offset now: the scan stops there. */
async function untilEnds(admin: Admin, topic: string): Promise<Map<number, bigint>> {
  const ends = new Map<number, bigint>();
  for (const { partition, low, high } of await admin.fetchTopicOffsets(topic)) {
    if (BigInt(high) > BigInt(low)) ends.set(partition, BigInt(high));
  }
  return ends;
}

/** Reads every record before `ends` and keeps what `match` returns. */
async function scan(
  consumer: Consumer,
  topic: string,
  ends: Map<number, bigint>,
  match: (message: KafkaMessage) => DeadLetterCopy | undefined,
): Promise<DeadLetterCopy[]> {
  const found: DeadLetterCopy[] = [];
  let scanned = 0;
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let timer: NodeJS.Timeout | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new OncelyError(
              'BROKER_UNREACHABLE',
              `reading dead-letter topic '${topic}' took longer than ${SCAN_TIMEOUT_MS / 1000} s`,
            ),
          ),
        SCAN_TIMEOUT_MS,
      );
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const end = ends.get(batch.partition);
            if (end === undefined) return;
            for (const message of batch.messages) {
              if (BigInt(message.offset) >= end) break;
              const copy = match(message);
              if (copy) found.push(copy);
              if (++scanned >= MAX_SCANNED) return resolve();
            }
            if (BigInt(batch.lastOffset()) + 1n >= end) ends.delete(batch.partition);
            if (ends.size === 0) resolve();
          },
        })
        .catch(reject);
    });
  } finally {
    clearTimeout(timer);
  }
  return found;
}

/** The dead letter as a copy of `messageId`, when this consumer dead-lettered that message. */
function copyOf(
  record: KafkaMessage,
  consumerName: string,
  strategy: IdStrategy,
  messageId: string,
): DeadLetterCopy | undefined {
  const headers = headersToAttributes(record.headers);
  if (headers[DEAD_LETTER_HEADERS.consumer] !== consumerName) return undefined;
  const topic = headers[DEAD_LETTER_HEADERS.topic];
  const partition = Number(headers[DEAD_LETTER_HEADERS.partition]);
  const offset = headers[DEAD_LETTER_HEADERS.offset];
  if (topic === undefined || !Number.isInteger(partition) || offset === undefined) return undefined;
  // The record as the consumer saw it: its own coordinates, for the 'broker' ID strategy.
  const original = toEnvelope(topic, partition, { ...record, offset });
  if (resolveMessageId(strategy, original) !== messageId) return undefined;
  const at = headers[DEAD_LETTER_HEADERS.timestamp];
  return {
    reason: headers[DEAD_LETTER_HEADERS.reason],
    description: headers[DEAD_LETTER_HEADERS.detail],
    enqueuedAt: at === undefined ? undefined : new Date(at),
  };
}
