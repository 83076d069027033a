/**
 * Writing a dead letter to `<topic>.dlq`, keeping the evidence that fits when the
 * dead-letter topic refuses the record as too large.
 */
import type { AdapterRuntime, DeadLetterReason } from '@oncely/core';
import type { KafkaMessage, Message } from 'kafkajs';
import { DEAD_LETTER_HEADERS, deadLetterRecord } from '../deadLetter.js';
import { MESSAGE_ID_HEADER } from '../send.js';
import type { DeadLetterProducer } from './clientApi.js';

/** Where and for whom {@link publishDeadLetter} writes. */
export interface DeadLetterTarget {
  producer: DeadLetterProducer;
  deadLetterTopic: string;
  consumerName: string;
  /** Told when the record had to be written without its value. */
  runtime: AdapterRuntime | undefined;
  /**
   * Bounds each send (`broker.requestTimeout`): @platformatic/kafka retries a send to a
   * topic that is gone without end, so a dead letter would never fail and its partition
   * wait unreported. On kafkajs it is the acks timeout (30 s by default, as before).
   */
  timeoutMs: number;
}

/** Produces the dead letter of `message` (acks -1), smaller when the topic refuses it. */
export async function publishDeadLetter(
  target: DeadLetterTarget,
  batch: { topic: string; partition: number },
  message: KafkaMessage,
  reason: DeadLetterReason,
  detail: string,
  attempts?: number,
): Promise<void> {
  const record = deadLetterRecord({
    topic: batch.topic,
    partition: batch.partition,
    message,
    consumer: target.consumerName,
    reason,
    detail,
    ...(attempts === undefined ? {} : { attempts }),
  });
  const produce = (messages: Message[]) =>
    target.producer.send(target.deadLetterTopic, messages, { timeoutMs: target.timeoutMs });
  try {
    await produce([record]);
  } catch (error) {
    if (!isTooLarge(error)) throw error;
    // The dead-letter topic refuses the record (its max.message.bytes is below the
    // source topic's): it would be refused on every redelivery too, and the partition
    // would never move. Keep the evidence that fits: first without the value, then
    // with Oncely's headers only. The original stays readable at its offset until the
    // source topic's retention removes it.
    const size = message.value?.length ?? 0;
    const note = `MESSAGE_TOO_LARGE: the ${size}-byte value was left out; read it at ${batch.topic}/${batch.partition}/${message.offset}`;
    const withoutValue: Message = {
      ...record,
      value: null,
      headers: { ...record.headers, [DEAD_LETTER_HEADERS.valueDropped]: note },
    };
    target.runtime?.reportError(
      error,
      `dead letter too large for '${target.deadLetterTopic}'; writing it without its value`,
    );
    try {
      await produce([withoutValue]);
    } catch (again) {
      if (!isTooLarge(again)) throw again;
      const ours = Object.fromEntries(
        Object.entries(withoutValue.headers ?? {}).filter(
          ([name]) => name === MESSAGE_ID_HEADER || name.startsWith('oncely-'),
        ),
      );
      await produce([{ ...withoutValue, headers: ours }]);
    }
  }
}

/** The broker refused a record as larger than the topic's `max.message.bytes`. */
function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = e.cause as typeof e;
  }
  return false;
}
