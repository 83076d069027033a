import type { ConsumerConfig, DeadLetterSession, HeldDeadLetter } from '@oncely/core';
import { resolveMemoryConfig } from './config.js';
import type { MemoryBroker } from './MemoryBroker.js';
import type { DeadLetter } from './types.js';
import { MESSAGE_ID_ATTRIBUTE } from './validation.js';

interface MemoryHeld extends HeldDeadLetter {
  readonly entry: DeadLetter;
}

/**
 * A pass over the consumer queue's dead-letter list (`broker.deadLetters(queue)`) for
 * `DeadLetters` / `oncely dlq`: `replay` sends the message back to the queue under its
 * producer ID with its attributes, then takes it off the list; `remove` takes it off.
 * In-process, so nothing is held: `close()` has nothing to give back. Copies a queue's
 * `deadLetterQueue` received are that queue's messages, not touched here.
 *
 * @example
 * ```ts
 * const session = await openDeadLetters({ name: 'payments', broker: { type: 'memory', broker, queue: 'payments' }, store, handler });
 * ```
 */
export async function openDeadLetters(config: ConsumerConfig<any, any>): Promise<DeadLetterSession> {
  const { broker, queue } = resolveMemoryConfig(config.broker);
  return new MemoryDeadLetterSession(broker, queue);
}

class MemoryDeadLetterSession implements DeadLetterSession {
  /** As the adapter: the `message-id` attribute. */
  readonly defaultIdStrategy = { attribute: MESSAGE_ID_ATTRIBUTE };

  constructor(
    private readonly broker: MemoryBroker,
    private readonly queue: string,
  ) {}

  get name(): string {
    return `${this.queue} (dead-letter list)`;
  }

  async read(): Promise<HeldDeadLetter[]> {
    return this.broker.deadLetters(this.queue).map(
      (entry): MemoryHeld => ({
        entry,
        envelope: {
          body: entry.body,
          attributes: entry.attributes,
          producerMessageId: entry.producerMessageId,
          brokerMessageId: entry.messageId,
        },
        reason: entry.reason,
        ...(entry.detail !== undefined ? { error: entry.detail } : {}),
        attempts: entry.deliveryCount,
        lastFailedAt: new Date(entry.at),
      }),
    );
  }

  async replay(letter: HeldDeadLetter): Promise<void> {
    const { entry } = letter as MemoryHeld;
    const { [MESSAGE_ID_ATTRIBUTE]: _, ...attributes } = entry.attributes;
    await this.broker.send(this.queue, {
      ...(entry.producerMessageId !== undefined ? { id: entry.producerMessageId } : {}),
      body: entry.body,
      attributes,
      ...(entry.groupId !== undefined ? { groupId: entry.groupId } : {}),
    });
    this.broker.removeDeadLetter(this.queue, entry.messageId);
  }

  async remove(letter: HeldDeadLetter): Promise<void> {
    this.broker.removeDeadLetter(this.queue, (letter as MemoryHeld).entry.messageId);
  }

  async close(): Promise<void> {}
}
