import { ServiceBusClient, type ServiceBusReceivedMessage } from '@azure/service-bus';
import {
  type BrokerConfig,
  type ConsumerConfig,
  type DeadLetterCopy,
  type IdStrategy,
  resolveMessageId,
} from '@oncely/core';
import { parseServiceBusConfig } from './serviceBusConfig.js';
import { toEnvelope } from './toEnvelope.js';

/** Most dead letters read per call: a peek is cheap, but a huge DLQ is not scanned whole. */
const MAX_SCANNED = 5000;
const PAGE = 250;

/**
 * The copies of `messageId` in the entity's dead-letter sub-queue, peeked (never
 * received, so nothing changes), matched with the consumer's ID strategy. What
 * `oncely inspect` shows for a message without a marker. Scans at most 5000 dead letters.
 *
 * @example
 * ```ts
 * const copies = await findDeadLetters({ name: 'payments', broker: { type: 'servicebus', connectionString, queueName: 'payments' }, store, handler }, 'order-42');
 * // [{ reason: 'max-attempts', description: '...', deliveryCount: 5, enqueuedAt: 2026-... }]
 * ```
 */
export async function findDeadLetters(
  config: ConsumerConfig<any, any>,
  messageId: string,
): Promise<DeadLetterCopy[]> {
  const settings = parseServiceBusConfig(config.broker as BrokerConfig);
  const client = settings.client ?? new ServiceBusClient(settings.connectionString!, settings.clientOptions);
  const options = { subQueueType: 'deadLetter' as const };
  const receiver = settings.queueName
    ? client.createReceiver(settings.queueName, options)
    : client.createReceiver(settings.topicName!, settings.subscriptionName!, options);
  const strategy: IdStrategy = config.idStrategy ?? 'producer';
  const found: DeadLetterCopy[] = [];
  try {
    let scanned = 0;
    let fromSequenceNumber: NonNullable<ServiceBusReceivedMessage['sequenceNumber']> | undefined;
    while (scanned < MAX_SCANNED) {
      const page = await receiver.peekMessages(PAGE, fromSequenceNumber ? { fromSequenceNumber } : {});
      if (page.length === 0) break;
      scanned += page.length;
      for (const message of page) {
        if (resolveMessageId(strategy, toEnvelope(message, settings.entityPath)) !== messageId) continue;
        found.push({
          reason: message.deadLetterReason,
          description: message.deadLetterErrorDescription,
          enqueuedAt: message.enqueuedTimeUtc,
          deliveryCount: message.deliveryCount,
        });
      }
      const last = page.at(-1)?.sequenceNumber;
      if (last === undefined) break;
      fromSequenceNumber = last.add(1);
    }
  } finally {
    await receiver.close().catch(() => {});
    if (!settings.client) await client.close().catch(() => {});
  }
  return found;
}
