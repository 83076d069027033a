import { randomUUID } from 'node:crypto';
import type { ServiceBusMessage, ServiceBusSender } from '@azure/service-bus';
import { traceHeaders } from '@oncely/core';

/**
 * Options of {@link sendWithId}.
 *
 * @example
 * ```ts
 * const options: SendWithIdOptions = { attempts: 5, retryDelayMs: 200 };
 * ```
 */
export interface SendWithIdOptions {
  /** Send attempts in all, each with the same MessageIds. @default 3 */
  attempts?: number;
  /** Pause before the second attempt, doubling after. @default 200 */
  retryDelayMs?: number;
}

/**
 * Sends messages with a MessageId on each (the one given, or a new UUID) and retries a
 * failed send with the **same** IDs, so the consumer's `'producer'` ID strategy (and
 * Service Bus duplicate detection, where enabled) sees a retried send as the same
 * message. Resolves with the IDs, in order.
 *
 * A send whose outcome is unknown (a timeout) may have reached the entity: retrying with
 * the same ID is what makes that safe.
 *
 * The active OpenTelemetry context goes along as `traceparent`/`tracestate` (see
 * docs/observability.md), so the consumer's span joins the sender's trace.
 *
 * @example
 * ```ts
 * const sender = client.createSender('payments');
 * const [id] = await sendWithId(sender, { body: { orderId: 42 }, messageId: 'order-42' });
 * ```
 */
export async function sendWithId(
  sender: ServiceBusSender,
  messages: ServiceBusMessage | ServiceBusMessage[],
  options: SendWithIdOptions = {},
): Promise<string[]> {
  const trace = traceHeaders();
  const list = (Array.isArray(messages) ? messages : [messages]).map((message) => ({
    ...message,
    messageId: message.messageId ?? randomUUID(),
    // The sender's trace context (W3C traceparent), unless the caller's properties set one.
    applicationProperties: { ...trace, ...(message.applicationProperties ?? {}) },
  }));
  const attempts = Math.max(1, options.attempts ?? 3);
  let delay = options.retryDelayMs ?? 200;
  for (let attempt = 1; ; attempt++) {
    try {
      await sender.sendMessages(list);
      return list.map((message) => String(message.messageId));
    } catch (error) {
      if (attempt >= attempts || (error as { retryable?: unknown }).retryable === false) throw error;
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay *= 2;
    }
  }
}
