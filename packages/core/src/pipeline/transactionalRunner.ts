/**
 * The `transactional` and `offsets` runner for one delivery: claim (the marker, or the
 * partition's offset) and the handler's effect in one transaction, then the settlement.
 */
import { OncelyError } from '../errors.js';
import { fingerprintStore, retryTransient } from '../processOnce.js';
import type { IdempotencyStore, MessageKey } from '../types.js';
import { AttemptsExhausted, type Outcome, type Pipeline, type Prepared, ReleaseRequested } from './shared.js';

/** Thrown inside the transaction when offsets mode finds the record already applied. */
class AlreadyApplied extends Error {}

export class TransactionalRunner<TBody, Tx> {
  constructor(private readonly p: Pipeline<TBody, Tx>) {}

  /** One delivery: its own transaction (claim → handler → commit), then its settlement (ack...). */
  async runOne(prepared: Prepared<TBody>): Promise<Outcome | undefined> {
    const started = Date.now();
    const outcome = await this.p.guard.withStore([prepared], prepared.event, () =>
      this.runTransactional(prepared),
    );
    if (outcome === undefined) return undefined;
    const { consumer, messageId, attempt } = prepared.event;
    await this.p.settlement.conclude(outcome, prepared.delivery, {
      consumer,
      messageId,
      attempt,
      durationMs: Date.now() - started,
    });
    return outcome;
  }

  /** Marker (or offset) and effect in one transaction. */
  private async runTransactional({
    message,
    key,
    attempt,
    keeper,
    delivery,
    fingerprint,
  }: Prepared<TBody>): Promise<Outcome> {
    const { settings, store } = this.p;
    const offset = delivery.envelope.offset;
    try {
      if (settings.mode === 'offsets' && !offset) {
        throw new OncelyError(
          'CONFIG_INVALID',
          `mode 'offsets' needs a broker with ordered offsets (Kafka), not '${this.p.adapter.type}'`,
        );
      }
      return await retryTransient(store, () =>
        store.transaction(async (tx): Promise<Outcome> => {
          if (offset && settings.mode === 'offsets') {
            const advanced = await store.offsets!.advance(
              tx,
              key.consumer,
              offset.topic,
              offset.partition,
              offset.offset,
            );
            if (!advanced) throw new AlreadyApplied();
          } else if (fingerprint !== undefined) {
            const claimed = await fingerprintStore(store).claim(
              tx,
              key.consumer,
              new Map([[key.messageId, fingerprint]]),
            );
            if (!claimed.has(key.messageId)) return compareFingerprint(store, key, fingerprint, tx);
          } else {
            const claimed = await store.claim(tx, key.consumer, [key.messageId]);
            if (!claimed.has(key.messageId)) return { kind: 'duplicate' };
          }
          // Claimed, so earlier attempts did not commit. Past the limit, earlier attempts
          // crashed the process: roll back and dead-letter instead of crashing again.
          if (attempt > settings.maxAttempts) throw new AttemptsExhausted();
          await this.p.handlers.runHandler(message, tx, attempt, keeper);
          return { kind: 'processed' };
        }),
      );
    } catch (error) {
      if (error instanceof AlreadyApplied) return { kind: 'duplicate' };
      if (error instanceof AttemptsExhausted) return { kind: 'exhausted' };
      if (error instanceof ReleaseRequested) return { kind: 'release' };
      if (store.classifyError(error) === 'unavailable') throw error;
      return { kind: 'failed', error };
    }
  }
}

/**
 * A duplicate under `payloadFingerprint`: a mismatch when the marker holds another
 * fingerprint. A marker written without one (before the option was on) is a duplicate.
 */
export async function compareFingerprint<Tx>(
  store: IdempotencyStore<Tx>,
  key: MessageKey,
  fingerprint: string,
  tx?: Tx,
): Promise<Outcome> {
  const stored = (await fingerprintStore(store).read(key.consumer, [key.messageId], tx)).get(key.messageId);
  if (stored === undefined || stored === fingerprint) return { kind: 'duplicate' };
  return { kind: 'mismatch', mismatch: { storedFingerprint: stored, fingerprint } };
}
