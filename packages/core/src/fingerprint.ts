import { createHash } from 'node:crypto';
import { ConfigError } from './errors.js';
import type { Envelope, Message, PayloadFingerprintOption } from './types.js';

/** The values of `onPayloadMismatch`. */
export const MISMATCH_POLICIES = ['skip', 'dead-letter'] as const;

/**
 * What {@link payloadFingerprint} hashes: a body and, optionally, attributes.
 *
 * @example
 * ```ts
 * const payload: FingerprintedPayload = { body: '{"amount":40}', attributes: { tenant: 't-1' } };
 * ```
 */
export interface FingerprintedPayload {
  /** Bytes or text as sent (hashed as they are), or a decoded value (JSON with sorted keys). */
  body: unknown;
  attributes?: Readonly<Record<string, string>>;
}

/**
 * The default payload fingerprint: SHA-256 over the body and the named attributes, each
 * part length-prefixed so no two different payloads concatenate to the same bytes, and
 * an absent attribute differs from an empty one. What `payloadFingerprint: true` (or
 * `{ attributes }`) stores on the marker; use it with `processOnce` to do the same.
 *
 * @example
 * ```ts
 * const fingerprint = payloadFingerprint({ body: event.body, attributes: event.headers }, ['tenant']);
 * const outcome = await processOnce(store, { consumer: 'payments', messageId: event.id }, work, { fingerprint });
 * if (outcome.status === 'duplicate' && outcome.payloadMismatch) console.warn('same ID, different payload');
 * ```
 */
export function payloadFingerprint(
  payload: FingerprintedPayload,
  attributeNames: readonly string[] = [],
): string {
  const hash = createHash('sha256');
  const part = (bytes: Buffer) => {
    hash.update(`${bytes.length}:`);
    hash.update(bytes);
  };
  part(canonicalBytes(payload.body));
  for (const name of [...new Set(attributeNames)].sort()) {
    const value = payload.attributes?.[name];
    part(Buffer.from(name, 'utf8'));
    // '-' (absent) cannot collide with a present value: those are length-prefixed after '+'.
    if (value === undefined) hash.update('-');
    else {
      hash.update('+');
      part(Buffer.from(value, 'utf8'));
    }
  }
  return `sha256:${hash.digest('hex')}`;
}

/**
 * The fingerprint a consumer stores for one delivery under its option, or undefined when
 * the option is off. A custom function's string is hashed, so the column stays small.
 * For entry points outside the consumer loop (the Lambda handlers) that take the same
 * `payloadFingerprint` option.
 *
 * @example
 * ```ts
 * const fingerprint = fingerprintDelivery({ attributes: ['tenant'] }, envelope, message);
 * ```
 */
export function fingerprintDelivery<TBody>(
  option: PayloadFingerprintOption<TBody> | undefined,
  envelope: Envelope,
  message: Message<TBody>,
): string | undefined {
  if (option === undefined || option === false) return undefined;
  if (option === true) return payloadFingerprint({ body: envelope.body });
  if (typeof option === 'function') {
    const text = option(message);
    if (typeof text !== 'string' || text === '') {
      throw new ConfigError('payloadFingerprint', `must return a non-empty string; got ${typeof text}`);
    }
    return `custom:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
  }
  return payloadFingerprint({ body: envelope.body, attributes: envelope.attributes }, option.attributes);
}

/**
 * Checks the `payloadFingerprint` and `onPayloadMismatch` options; throws a `ConfigError`
 * naming the option.
 *
 * @example
 * ```ts
 * validateFingerprintOptions(options.payloadFingerprint, options.onPayloadMismatch);
 * ```
 */
export function validateFingerprintOptions(option: unknown, policy: unknown): void {
  if (option !== undefined && typeof option !== 'boolean' && typeof option !== 'function') {
    const attributes = (option as { attributes?: unknown } | null)?.attributes;
    if (
      typeof option !== 'object' ||
      !Array.isArray(attributes) ||
      attributes.some((name) => typeof name !== 'string' || name === '')
    ) {
      throw new ConfigError(
        'payloadFingerprint',
        'must be true, false, { attributes: [names] } or a function (message) => string',
      );
    }
  }
  if (policy !== undefined && !(MISMATCH_POLICIES as readonly unknown[]).includes(policy)) {
    throw new ConfigError(
      'onPayloadMismatch',
      `must be 'skip' or 'dead-letter', got ${JSON.stringify(policy)}`,
    );
  }
}

function canonicalBytes(body: unknown): Buffer {
  if (body === undefined || body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  if (body instanceof Uint8Array) return Buffer.from(body);
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  return Buffer.from(JSON.stringify(sortKeys(body)) ?? '', 'utf8');
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object' || Buffer.isBuffer(value) || value instanceof Date)
    return value;
  const sorted: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort())
    sorted[key] = sortKeys((value as Record<string, unknown>)[key]);
  return sorted;
}
