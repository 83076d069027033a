import {
  type BrokerType,
  CONSUMER_DEFAULTS,
  type DeadLetterCopy,
  loadAdapterModule,
  loadConfig,
} from '@oncely/core';
import type { CliIo } from './main.js';
import type { MarkerRow, OpenedStore } from './stores.js';

/**
 * What the store can tell about one message, in words. A message has no marker until its
 * first successful commit, so "no marker" covers several stories; the attempt counter
 * (failed runs) tells them apart as far as the database can.
 */
export function explainMessage(
  marker: MarkerRow | undefined,
  attempts: { attempts: number; updated_at: Date } | undefined,
  maxAttempts: number,
): string {
  if (marker?.status === 'completed') {
    return `processed at ${iso(marker.processed_at)}: its effect committed with the marker; a redelivery is acked as a duplicate`;
  }
  if (marker?.status === 'in_progress') {
    return marker.expired
      ? `in progress (leased mode), but the claim of ${marker.owner} expired at ${iso(marker.locked_until)}: the next delivery takes it over`
      : `in progress (leased mode): held by ${marker.owner} until ${iso(marker.locked_until)} (renewed while the handler runs)`;
  }
  if (attempts && attempts.attempts >= maxAttempts) {
    return `not processed: ${attempts.attempts} failed runs (maxAttempts ${maxAttempts}), the last at ${iso(attempts.updated_at)}: dead-lettered with reason 'max-attempts'; read the broker's dead-letter queue`;
  }
  if (attempts && attempts.attempts > 0) {
    return `not processed yet: ${attempts.attempts} failed run(s) of ${maxAttempts}, the last at ${iso(attempts.updated_at)}: waiting for its retry after the backoff, or running now`;
  }
  return (
    'no trace in the store: never received by this consumer, running for the first time now (a first run writes nothing until it commits), ' +
    "dead-lettered without running (reason 'missing-id' or 'invalid-body'), or processed and since pruned"
  );
}

/** The message `oncely inspect` explains (checked by the CLI before the store opens). */
export interface InspectTarget {
  consumer: string;
  messageId: string;
}

/** `oncely inspect CONSUMER MESSAGE_ID`: the marker, the attempt counter, and what they mean. */
export async function inspect(
  { store, queries }: OpenedStore,
  { consumer, messageId }: InspectTarget,
  io: CliIo,
  configFile?: string,
): Promise<number> {
  const maxAttempts = Number(io.env.ONCELY_MAX_ATTEMPTS) || CONSUMER_DEFAULTS.maxAttempts;
  const { marker, attempts } = await store.transaction(async (tx) => {
    const [row] = (await tx.query<Record<string, unknown>>(queries.marker, [consumer, messageId])).rows;
    return {
      marker: row === undefined ? undefined : queries.markerRow(row),
      attempts: (
        await tx.query<{ attempts: number; updated_at: Date }>(queries.attempts, [consumer, messageId])
      ).rows[0],
    };
  });
  let explanation = explainMessage(marker, attempts, maxAttempts);
  let deadLetters: DeadLetterCopy[] | undefined;
  if (!marker && (configFile !== undefined || io.env.ONCELY_CONFIG_FILE || io.env.ONCELY_BROKER_TYPE)) {
    // Ask the broker, where it can read its dead letters without consuming them (Service Bus, Kafka).
    const config = loadConfig({ env: io.env, file: configFile });
    const module = await loadAdapterModule(config.broker.type as BrokerType);
    if (module.findDeadLetters) {
      deadLetters = await module.findDeadLetters({ ...config, store, handler: async () => {} }, messageId);
      explanation += deadLetters.length
        ? `. The dead-letter queue holds ${deadLetters.length} copy(ies): reason ${deadLetters.map((d) => `'${d.reason ?? '?'}'`).join(', ')}`
        : '. The dead-letter queue does not hold it';
    } else {
      explanation += `. (${config.broker.type} cannot list its dead letters without consuming them)`;
    }
  }
  // What an operator discarded from the dead-letter queue (`oncely dlq discard`).
  const discards = marker ? [] : ((await store.deadLetterLog?.discards(consumer, messageId)) ?? []);
  for (const d of discards) {
    explanation += `. Discarded from the dead-letter queue by ${d.discardedBy} at ${iso(d.discardedAt)} (reason '${d.reason}')`;
  }
  const { expired: _, ...shown } = marker ?? { expired: false };
  io.out.write(
    `${JSON.stringify(
      {
        consumer,
        messageId,
        marker: marker ? shown : null,
        attempts: attempts?.attempts ?? null,
        ...(deadLetters ? { deadLetters } : {}),
        ...(discards.length ? { discards } : {}),
        explanation,
      },
      null,
      2,
    )}\n`,
  );
  return marker ? 0 : 1;
}

function iso(value: Date | string | null): string {
  return value === null ? '?' : new Date(value).toISOString();
}
