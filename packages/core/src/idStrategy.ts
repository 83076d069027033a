import { createHash } from 'node:crypto';
import type { Envelope, IdStrategy } from './types.js';

/**
 * Resolves the stable message ID under `strategy`. Returns `undefined` when the message
 * carries none: the caller dead-letters it as poison (`missing-id`), never processes it
 * unprotected.
 *
 * @example
 * ```ts
 * resolveMessageId({ attribute: 'message-id' }, envelope);
 * ```
 */
export function resolveMessageId(strategy: IdStrategy, envelope: Envelope): string | undefined {
  const id = pick(strategy, envelope);
  // An empty or whitespace ID would collapse unrelated messages into one marker.
  return typeof id === 'string' && id.trim() !== '' ? id : undefined;
}

function pick(strategy: IdStrategy, envelope: Envelope): string | undefined {
  if (typeof strategy === 'function') return strategy(envelope);
  if (typeof strategy === 'object') return envelope.attributes[strategy.attribute];
  switch (strategy) {
    case 'producer':
      return envelope.producerMessageId;
    case 'broker':
      return envelope.brokerMessageId;
    case 'deduplication-id':
      return envelope.deduplicationId;
    case 'content-hash':
      return contentHash(envelope.body);
  }
}

function contentHash(body: unknown): string {
  const bytes =
    typeof body === 'string' || Buffer.isBuffer(body) || body instanceof Uint8Array
      ? body
      : JSON.stringify(body);
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

/** Human-readable name of a strategy, for dead-letter reasons and logs. */
export function describeIdStrategy(strategy: IdStrategy): string {
  if (typeof strategy === 'function') return 'a custom ID function';
  if (typeof strategy === 'object') return `attribute '${strategy.attribute}'`;
  return `'${strategy}'`;
}
