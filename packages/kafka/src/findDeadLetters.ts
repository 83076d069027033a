import { randomUUID } from 'node:crypto';
import {
  type ConsumerConfig,
  type DeadLetterCopy,
  type IdempotencyStore,
  type IdStrategy,
  resolveMessageId,
} from '@oncely/core';
import type { KafkaRecord } from './adapter/clientApi.js';
import { toolDriver } from './adapter/loadDriver.js';
import { defaultMessageId } from './client.js';
import { resolveKafkaConfig } from './config.js';
import { DEAD_LETTER_HEADERS } from './deadLetter.js';
import { deadLetterFingerprint } from './deadLetters.js';
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
 * a message without a marker. Scans at most 100,000 dead letters. Where the store keeps a
 * dead-letter ledger (`oncely dlq`), copies it marks replayed or discarded are left out:
 * the topic keeps them, but they are no longer waiting.
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
  const strategy: IdStrategy = config.idStrategy ?? ((envelope) => defaultMessageId(envelope, config.mode));
  // On broker.client: `oncely inspect` of a platformatic user needs no kafkajs.
  const driver = await toolDriver(resolved, 'inspect');
  const admin = driver.admin();
  await admin.connect();
  const groupId = `${resolved.groupId}-inspect-${randomUUID()}`;
  let scanned = false;
  try {
    if (!(await admin.topicExists(deadLetterTopic))) return [];
    // Each non-empty partition's end offset now: the scan stops there.
    const ends = new Map<number, bigint>();
    for (const { partition, low, high } of await admin.partitionOffsets(deadLetterTopic)) {
      if (high > low) ends.set(partition, high);
    }
    if (ends.size === 0) return [];
    // Copies `oncely dlq` replayed or discarded (the topic cannot forget them): by position,
    // and only while the row speaks of the same record.
    const ledger = (config.store as IdempotencyStore<unknown> | undefined)?.deadLetterLog?.ledger;
    const settled = new Map(
      (ledger ? await ledger.entries(config.name, deadLetterTopic) : [])
        .filter((entry) => entry.state !== 'replaying')
        .map((entry) => [`${entry.partition}/${entry.offset}`, entry.fingerprint]),
    );
    const found: DeadLetterCopy[] = [];
    let count = 0;
    scanned = true;
    await driver.scanTopic({
      topic: deadLetterTopic,
      groupId,
      ends,
      timeoutMs: SCAN_TIMEOUT_MS,
      visit: (record, partition) => {
        const copy = copyOf(record, config.name, strategy, messageId);
        const handled = settled.get(`${partition}/${record.offset}`);
        if (copy && handled !== deadLetterFingerprint(headersToAttributes(record.headers))) found.push(copy);
        return ++count >= MAX_SCANNED;
      },
    });
    return found;
  } finally {
    if (scanned) await admin.deleteGroup(groupId).catch(() => {});
    await admin.disconnect().catch(() => {});
  }
}

/** The dead letter as a copy of `messageId`, when this consumer dead-lettered that message. */
function copyOf(
  record: KafkaRecord,
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
