import type { ServiceBusClient, ServiceBusMessage, ServiceBusSender } from '@azure/service-bus';
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
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
              applicationProperties: { ...message.attributes },
              ...(options.keyAsSessionId && message.key !== undefined ? { sessionId: message.key } : {}),
            };
          });
          try {
            await sendWithId(senderOf(destination), batch, { attempts: 1 });
            for (const index of indexes) results[index] = { ok: true };
          } catch (error) {
            for (const index of indexes) results[index] = { ok: false, error };
          }
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
