import type { ServiceBusClient, ServiceBusMessage, ServiceBusSender } from '@azure/service-bus';
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError, traceHeaders } from '@oncely/core';
import { sendWithId } from './sendWithId.js';

/**
 * Options of {@link createServiceBusProducer}.
 *
 * @example
 * ```ts
 * createServiceBusProducer({ client: new ServiceBusClient(connectionString), keyAsSessionId: true });
 * ```
 */
export interface ServiceBusProducerOptions {
  /** Your client; the producer closes only the senders it created. */
  client: ServiceBusClient;
  /**
   * Send the row's key as the `sessionId` (per-key order on a session-enabled entity).
   * @default false (the key is not sent: a non-session entity has no per-key order)
   */
  keyAsSessionId?: boolean;
}

/**
 * The outbox producer for Service Bus: sends the rows of one destination (a queue or
 * topic name) in one `sendMessages` call, each with the row's ID as `messageId` (what
 * the adapter's default `'producer'` ID strategy reads, and what duplicate detection
 * keys on) and its attributes as application properties. A row counts as sent once the
 * service accepted the send.
 *
 * @example
 * ```ts
 * import { createRelay } from '@oncely/postgres';
 * import { createServiceBusProducer } from '@oncely/servicebus';
 *
 * const producer = createServiceBusProducer({ client });
 * const relay = createRelay({ store, producers: producer });
 * await relay.start();
 * // ... on shutdown
 * await relay.stop();
 * await producer.close();
 * ```
 */
export function createServiceBusProducer(
  options: ServiceBusProducerOptions,
): OutboxProducer & { close(): Promise<void> } {
  if (typeof options !== 'object' || options === null || !options.client) {
    throw new ConfigError('client', 'a ServiceBusClient is required');
  }
  const senders = new Map<string, ServiceBusSender>();
  const senderOf = (destination: string): ServiceBusSender => {
    let sender = senders.get(destination);
    if (!sender) {
      sender = options.client.createSender(destination);
      senders.set(destination, sender);
    }
    return sender;
  };
  return {
    async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      const results: OutboxSendResult[] = new Array(messages.length);
      const byDestination = new Map<string, number[]>();
      messages.forEach((message, index) => {
        const list = byDestination.get(message.destination) ?? [];
        list.push(index);
        byDestination.set(message.destination, list);
      });
      await Promise.all(
        [...byDestination].map(async ([destination, indexes]) => {
          const batch: ServiceBusMessage[] = indexes.map((index) => {
            const message = messages[index]!;
            return {
              body: Buffer.from(message.body),
              messageId: message.id,
              // The trace headers sendWithId would add, here so packing counts them.
              applicationProperties: { ...traceHeaders(), ...message.attributes },
              ...(options.keyAsSessionId && message.key !== undefined ? { sessionId: message.key } : {}),
            };
          });
          await sendPacked(senderOf(destination), batch, indexes, results);
        }),
      );
      return results;
    },
    async close(): Promise<void> {
      const open = [...senders.values()];
      senders.clear();
      await Promise.all(open.map((sender) => sender.close().catch(() => {})));
    },
  };
}

/**
 * Sends a destination's messages in as few calls as fit: packed with the sender's own
 * batch (which knows the entity's size limit) before sending, so one call never fails
 * for its size; a message too large even alone fails permanently, by itself. A call
 * refused anyway (the limit changed) is split in halves.
 */
async function sendPacked(
  sender: ServiceBusSender,
  messages: ServiceBusMessage[],
  indexes: number[],
  results: OutboxSendResult[],
): Promise<void> {
  const groups: number[][] = [];
  try {
    let batch = await sender.createMessageBatch();
    let group: number[] = [];
    for (let n = 0; n < messages.length; n++) {
      if (batch.tryAddMessage(messages[n]!)) {
        group.push(n);
        continue;
      }
      if (group.length > 0) groups.push(group);
      batch = await sender.createMessageBatch();
      group = [];
      if (batch.tryAddMessage(messages[n]!)) group.push(n);
      else {
        results[indexes[n]!] = {
          ok: false,
          error: new Error(
            `message ${messages[n]!.messageId} is larger than the entity accepts (${batch.maxSizeInBytes} bytes)`,
          ),
          permanent: true,
        };
        batch = await sender.createMessageBatch();
      }
    }
    if (group.length > 0) groups.push(group);
  } catch (error) {
    for (const index of indexes) results[index] ??= { ok: false, error };
    return;
  }
  for (const group of groups) await sendGroup(sender, messages, group, indexes, results);
}

async function sendGroup(
  sender: ServiceBusSender,
  messages: ServiceBusMessage[],
  group: number[],
  indexes: number[],
  results: OutboxSendResult[],
): Promise<void> {
  try {
    await sendWithId(
      sender,
      group.map((n) => messages[n]!),
      { attempts: 1 },
    );
    for (const n of group) results[indexes[n]!] = { ok: true };
  } catch (error) {
    if (
      group.length > 1 &&
      /too big|too large|MessageSizeExceeded/i.test(
        String((error as Error)?.message) + String((error as { code?: unknown })?.code),
      )
    ) {
      const half = Math.ceil(group.length / 2);
      await sendGroup(sender, messages, group.slice(0, half), indexes, results);
      await sendGroup(sender, messages, group.slice(half), indexes, results);
      return;
    }
    for (const n of group) results[indexes[n]!] = { ok: false, error };
  }
}
