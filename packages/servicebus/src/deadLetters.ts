import { createHash } from 'node:crypto';
import {
  ServiceBusClient,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
  type ServiceBusSender,
} from '@azure/service-bus';
import type { BrokerConfig, ConsumerConfig, DeadLetterSession, HeldDeadLetter } from '@oncely/core';
import type { AmqpAnnotatedMessage } from './retryCopy.js';
import { parseServiceBusConfig } from './serviceBusConfig.js';
import { COPY_PROPERTIES, toEnvelope } from './toEnvelope.js';
import { waitUntil } from './waitUntil.js';

/** Service Bus caps a MessageId at 128 characters. */
const MAX_MESSAGE_ID_LENGTH = 128;
/** Dead letters received per call while reading the sub-queue. */
const RECEIVE_BATCH = 100;

/**
 * How long `close()` waits for the broker: first to take the abandons, then to close the
 * links and the connection. Each of those waits for an answer (about a minute each, then
 * retries, on a silent connection: `oncely dlq` hung for minutes as it finished). Past it
 * `close()` returns: what was not abandoned returns when its lock expires (the queue's
 * `LockDuration`), and the client finishes closing in the background.
 */
export const DEAD_LETTER_CLOSE_TIMEOUT_MS = 10_000;

interface ServiceBusHeld extends HeldDeadLetter {
  readonly message: ServiceBusReceivedMessage;
}

/**
 * Opens a pass over the entity's dead-letter sub-queue for `DeadLetters` / `oncely dlq`.
 *
 * Strategy: `read()` receives every dead letter in peek-lock mode (until a 1-second wait
 * brings nothing) and holds the locks; `replay` sends a copy to the entity and completes
 * the dead letter once the send was accepted; `remove` completes it; `close()` abandons the
 * rest (a dead-letter sub-queue never dead-letters again, so abandoning costs only a
 * delivery count). The copy keeps body, properties, session and application properties;
 * its MessageId is the original's plus `|oncely-replay-<dead-letter sequence number>`, with
 * the original in `oncely-message-id` (what the `'producer'` strategy reads), so duplicate
 * detection, which saw the original, does not drop it, and does drop a second send of the
 * same dead letter after a crash between send and complete.
 *
 * Limits: a pass holds its locks for the entity's lock duration (not renewed): a pass
 * longer than that loses them, its completes fail and the dead letters come back (a
 * replayed one is then in both places, and the marker absorbs the second run).
 *
 * @example
 * ```ts
 * const session = await openDeadLetters({ name: 'payments', broker: { type: 'servicebus', connectionString, queueName: 'payments' }, store, handler });
 * ```
 */
export async function openDeadLetters(config: ConsumerConfig<any, any>): Promise<DeadLetterSession> {
  const settings = parseServiceBusConfig(config.broker as BrokerConfig);
  const client = settings.client ?? new ServiceBusClient(settings.connectionString!, settings.clientOptions);
  const options = { subQueueType: 'deadLetter' as const, receiveMode: 'peekLock' as const };
  const receiver = settings.queueName
    ? client.createReceiver(settings.queueName, options)
    : client.createReceiver(settings.topicName!, settings.subscriptionName!, options);
  // A subscription's messages go back through its topic (every subscription gets the copy:
  // the others' markers absorb it, as for any re-send to a topic).
  const sender = client.createSender(settings.queueName ?? settings.topicName!);
  return new ServiceBusDeadLetterSession(
    receiver,
    sender,
    settings.client ? undefined : client,
    `${settings.entityPath}/$DeadLetterQueue`,
    settings.entityPath,
  );
}

class ServiceBusDeadLetterSession implements DeadLetterSession {
  readonly defaultIdStrategy = 'producer' as const;
  private readonly held = new Set<ServiceBusReceivedMessage>();

  constructor(
    private readonly receiver: ServiceBusReceiver,
    private readonly sender: ServiceBusSender,
    private readonly ownedClient: ServiceBusClient | undefined,
    readonly name: string,
    private readonly entityPath: string,
  ) {}

  async read(): Promise<HeldDeadLetter[]> {
    const letters: ServiceBusHeld[] = [];
    for (;;) {
      const batch = await this.receiver.receiveMessages(RECEIVE_BATCH, { maxWaitTimeInMs: 1000 });
      if (batch.length === 0) return letters;
      for (const message of batch) {
        this.held.add(message);
        letters.push(this.describe(message));
      }
    }
  }

  async replay(letter: HeldDeadLetter): Promise<void> {
    const { message } = letter as ServiceBusHeld;
    await this.sender.sendMessages(replayCopy(message));
    // Only now: Service Bus accepted the copy.
    await this.remove(letter);
  }

  async remove(letter: HeldDeadLetter): Promise<void> {
    const { message } = letter as ServiceBusHeld;
    await this.receiver.completeMessage(message);
    this.held.delete(message);
  }

  async close(): Promise<void> {
    const deadline = Date.now() + DEAD_LETTER_CLOSE_TIMEOUT_MS;
    // A failed abandon costs nothing: the letter returns when its lock expires.
    const held = [...this.held];
    this.held.clear();
    await waitUntil(
      Promise.all(held.map((message) => this.receiver.abandonMessage(message).catch(() => {}))),
      deadline,
    );
    const closing = (async () => {
      await this.receiver.close().catch(() => {});
      await this.sender.close().catch(() => {});
      await this.ownedClient?.close().catch(() => {});
    })();
    await waitUntil(closing, deadline);
  }

  private describe(message: ServiceBusReceivedMessage): ServiceBusHeld {
    const envelope = toEnvelope(message, this.entityPath);
    const {
      [COPY_PROPERTIES.attempts]: attempts,
      DeadLetterReason: _reason,
      DeadLetterErrorDescription: _description,
      ...attributes
    } = envelope.attributes;
    return {
      message,
      envelope: {
        body: envelope.body,
        attributes,
        producerMessageId: envelope.producerMessageId,
        brokerMessageId: envelope.brokerMessageId,
      },
      reason: message.deadLetterReason ?? 'unknown',
      ...(message.deadLetterErrorDescription ? { error: message.deadLetterErrorDescription } : {}),
      ...(attempts !== undefined && Number(attempts) > 0 ? { attempts: Number(attempts) } : {}),
      ...(message.enqueuedTimeUtc ? { lastFailedAt: message.enqueuedTimeUtc } : {}),
    };
  }
}

/** The copy sent back: see {@link openDeadLetters}. */
function replayCopy(message: ServiceBusReceivedMessage): AmqpAnnotatedMessage {
  const raw = message._rawAmqpMessage;
  const envelope = toEnvelope(message, '');
  const originalId = envelope.producerMessageId ?? envelope.brokerMessageId ?? 'unknown';
  const sequence = message.sequenceNumber?.toString() ?? '0';
  let copyId = `${originalId}|oncely-replay-${sequence}`;
  if (copyId.length > MAX_MESSAGE_ID_LENGTH) {
    copyId = `oncely-replay-${sequence}-${createHash('sha256').update(originalId).digest('hex')}`;
  }
  const properties: Record<string, unknown> = { ...(raw.applicationProperties ?? {}) };
  // The dead letter's attempt count does not come back with it: a fresh budget.
  delete properties[COPY_PROPERTIES.attempts];
  // Service Bus's own dead-letter fields travel as application properties on the DLQ copy.
  delete properties.DeadLetterReason;
  delete properties.DeadLetterErrorDescription;
  if (envelope.producerMessageId !== undefined)
    properties[COPY_PROPERTIES.messageId] = envelope.producerMessageId;
  const annotations: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw.messageAnnotations ?? {})) {
    if (!key.startsWith('x-opt-') || key === 'x-opt-partition-key') annotations[key] = value;
  }
  const section = raw.body as { typecode?: unknown; content?: unknown } | null;
  const body =
    section !== null &&
    typeof section === 'object' &&
    typeof section.typecode === 'number' &&
    'content' in section
      ? section.content
      : raw.body;
  return {
    body,
    bodyType: raw.bodyType,
    header: raw.header ? { ...raw.header, deliveryCount: undefined } : undefined,
    properties: { ...(raw.properties ?? {}), messageId: copyId },
    applicationProperties: properties as AmqpAnnotatedMessage['applicationProperties'],
    messageAnnotations: annotations,
  };
}
