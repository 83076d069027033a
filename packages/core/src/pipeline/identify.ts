/**
 * Identify and decode: a delivery becomes a message with its ID, decoded body and
 * attempt number. A delivery without an ID, or whose body does not decode (poison), is
 * dead-lettered here and goes no further.
 */
import { decodeBody } from '../body.js';
import { fingerprintDelivery } from '../fingerprint.js';
import { describeIdStrategy, resolveMessageId } from '../idStrategy.js';
import type { Delivery, Message, MessageKey } from '../types.js';
import { errorText, type Held, type Pipeline, type Prepared } from './shared.js';

export class Identify<TBody, Tx> {
  constructor(private readonly p: Pipeline<TBody, Tx>) {}

  /** The delivery's message ID for events and logs; undefined when it has none (or the ID function threw). */
  idForLogs(delivery: Delivery): string | undefined {
    try {
      return resolveMessageId(this.p.settings.idStrategy, delivery.envelope);
    } catch {
      return undefined;
    }
  }

  /**
   * Resolves the ID, decodes the body (dead-lettering poison) and finds the attempt
   * number. Returns undefined when the delivery was settled here.
   */
  async prepare(held: Held, key: MessageKey | undefined): Promise<Prepared<TBody> | undefined> {
    const { settings, settlement } = this.p;
    const { delivery, event } = held;
    const { envelope } = delivery;
    if (!key) {
      const detail = `message has no ID under ${describeIdStrategy(settings.idStrategy)}`;
      await settlement.deadLetter(delivery, 'missing-id', detail, event);
      return undefined;
    }
    let body: unknown;
    try {
      body = decodeBody(settings.bodyFormat, envelope.body);
    } catch (error) {
      await settlement.deadLetter(
        delivery,
        'invalid-body',
        `body does not decode: ${errorText(error)}`,
        event,
      );
      return undefined;
    }
    const attempt = await this.p.guard.withStore([held], event, () =>
      this.p.ledger.attemptNumber(delivery, key),
    );
    if (attempt === undefined) return undefined;
    const message: Message<TBody> = {
      id: key.messageId,
      body: body as TBody,
      attributes: envelope.attributes,
      deliveryAttempt: attempt,
      redelivered: envelope.redelivered,
      orderingKey: envelope.orderingKey,
      sequence: envelope.sequence,
      source: envelope.source,
      broker: this.p.adapter.type,
      raw: envelope.raw,
    };
    // Spelled out rather than spread: this runs for every delivery, and spreads of these
    // objects are several times slower than the literal.
    const prepared: Prepared<TBody> = {
      delivery,
      keeper: held.keeper,
      key,
      attempt,
      message,
      event: { consumer: event.consumer, messageId: event.messageId, attempt },
    };
    try {
      prepared.fingerprint = fingerprintDelivery(settings.payloadFingerprint, envelope, message);
    } catch (error) {
      // The user's fingerprint function threw: a failed attempt like a handler's throw.
      await settlement.conclude({ kind: 'failed', error }, delivery, prepared.event);
      return undefined;
    }
    return prepared;
  }
}
