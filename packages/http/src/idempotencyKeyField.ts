/**
 * What {@link parseIdempotencyKey} found in the field.
 *
 * @example
 * ```ts
 * const parsed: ParsedIdempotencyKey = parseIdempotencyKey('"abc"', { maxLength: 255 });
 * ```
 */
export type ParsedIdempotencyKey =
  | { kind: 'missing' }
  | { kind: 'malformed'; reason: string }
  | { kind: 'ok'; key: string };

/**
 * The draft defines the header as a Structured Field string (`"abc"`); most clients send
 * it bare (`abc`). Both are accepted; the quotes are not part of the key.
 *
 * @example
 * ```ts
 * parseIdempotencyKey('"abc"', { maxLength: 255 }); // { kind: 'ok', key: 'abc' }
 * ```
 */
export function parseIdempotencyKey(
  value: string | string[] | undefined,
  options: { maxLength: number },
): ParsedIdempotencyKey {
  if (value === undefined) return { kind: 'missing' };
  if (Array.isArray(value)) return { kind: 'malformed', reason: 'The header must appear once.' };
  let key = value.trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1);
  if (key === '') return { kind: 'malformed', reason: 'The key is empty.' };
  if (key.length > options.maxLength)
    return { kind: 'malformed', reason: `The key is longer than ${options.maxLength} characters.` };
  if (!/^[\x20-\x7e]+$/.test(key) || key.includes('"') || key.includes('\\')) {
    return { kind: 'malformed', reason: 'The key must be printable ASCII without quotes or backslashes.' };
  }
  return { kind: 'ok', key };
}
