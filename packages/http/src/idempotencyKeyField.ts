/**
 * The Idempotency-Key field as the IETF draft defines it: an Item Structured Field (RFC
 * 8941, RFC 9651) whose value MUST be an sf-string, sent once. Parameters are parsed (and
 * must be well-formed) but carry no meaning: the draft defines none.
 */

/**
 * What {@link parseIdempotencyKey} found in the field.
 *
 * @example
 * ```ts
 * const parsed: ParsedIdempotencyKey = parseIdempotencyKey('"abc";v=1', { maxLength: 255, bareKeys: true });
 * ```
 */
export type ParsedIdempotencyKey =
  | { kind: 'missing' }
  | { kind: 'malformed'; reason: string }
  | { kind: 'ok'; key: string };

/**
 * Parses an Idempotency-Key field value.
 *
 * - `"abc"` (the draft's form): an sf-string; `\"` and `\\` are decoded, the quotes are not
 *   part of the key. Parameters (`"abc";v=1`) are accepted and ignored.
 * - `abc` (what most clients send, after Stripe): with `bareKeys`, a value that does not
 *   start with `"` is the key as it stands, if it is visible ASCII without `"`, `\`, `,`,
 *   `;` or whitespace; so it is the same key as `"abc"`. Without `bareKeys` it is refused:
 *   a Token, an Integer or any other bare item is not the String the draft requires.
 * - The field sent twice arrives as one value joined with `, ` (RFC 9110 §5.3): for the
 *   Structured Field parser that is text after the Item, for a bare key a comma. Both fail.
 *
 * @example
 * ```ts
 * parseIdempotencyKey('"a\\"b";v=1', { maxLength: 255, bareKeys: true }); // { kind: 'ok', key: 'a"b' }
 * ```
 */
export function parseIdempotencyKey(
  value: string | string[] | undefined,
  options: { maxLength: number; bareKeys: boolean },
): ParsedIdempotencyKey {
  if (value === undefined) return { kind: 'missing' };
  const field = Array.isArray(value) ? value.join(', ') : value;
  const trimmed = field.replace(/^[ \t]+|[ \t]+$/g, '');
  let key: string;
  if (!trimmed.startsWith('"') && options.bareKeys) {
    if (!/^[\x21-\x7e]+$/.test(trimmed) || /["\\,;]/.test(trimmed)) {
      return malformed(
        'A bare key must be visible ASCII without spaces, commas, semicolons, quotes or backslashes, and the field must appear once; send it as a quoted string ("...") to use other characters.',
      );
    }
    key = trimmed;
  } else {
    const item = parseItem(field);
    if (typeof item === 'string') return malformed(item);
    if (item.type !== 'string') {
      return malformed(
        `The field must be one Structured Field String ("..."), as the Idempotency-Key draft defines it; got ${item.type === 'token' ? 'a bare token' : `a ${item.type}`}.`,
      );
    }
    key = item.value;
  }
  if (key === '') return malformed('The key is empty.');
  if (key.length > options.maxLength)
    return malformed(`The key is longer than ${options.maxLength} characters.`);
  return { kind: 'ok', key };
}

function malformed(reason: string): ParsedIdempotencyKey {
  return { kind: 'malformed', reason };
}

type BareItemType =
  | 'string'
  | 'token'
  | 'integer'
  | 'decimal'
  | 'byte sequence'
  | 'boolean'
  | 'date'
  | 'display string';

/** An Item's bare item (its parameters are validated and dropped), or why the field is invalid. */
function parseItem(input: string): { type: BareItemType; value: string } | string {
  const reader = new Reader(input);
  reader.skipSpaces();
  const item = parseBareItem(reader);
  if (typeof item === 'string') return item;
  const parameters = parseParameters(reader);
  if (parameters !== undefined) return parameters;
  reader.skipSpaces();
  if (!reader.done) {
    return reader.peek() === ','
      ? 'The field must appear once (a list or a repeated field is not one key).'
      : `Unexpected ${JSON.stringify(reader.peek())} after the key.`;
  }
  return item;
}

/** RFC 9651 §4.2.3.2: parameters; undefined when well-formed, else why not. */
function parseParameters(reader: Reader): string | undefined {
  while (reader.peek() === ';') {
    reader.next();
    reader.skipSpaces();
    if (!/^[a-z*]$/.test(reader.peek())) return 'A parameter key must start with a lower-case letter or *.';
    while (/^[a-z0-9_\-.*]$/.test(reader.peek())) reader.next();
    if (reader.peek() === '=') {
      reader.next();
      const value = parseBareItem(reader);
      if (typeof value === 'string') return value;
    }
  }
  return undefined;
}

/** RFC 9651 §4.2.3.1: a bare item, or why it is invalid. */
function parseBareItem(reader: Reader): { type: BareItemType; value: string } | string {
  const first = reader.peek();
  if (first === '-' || isDigit(first)) return parseNumber(reader);
  if (first === '"') return parseString(reader);
  if (/^[A-Za-z*]$/.test(first)) {
    let token = '';
    while (/^[!#$%&'*+\-.^_`|~0-9A-Za-z:/]$/.test(reader.peek())) token += reader.next();
    return { type: 'token', value: token };
  }
  if (first === ':') {
    reader.next();
    while (/^[A-Za-z0-9+/=]$/.test(reader.peek())) reader.next();
    if (reader.next() !== ':') return 'A byte sequence must end with ":".';
    return { type: 'byte sequence', value: '' };
  }
  if (first === '?') {
    reader.next();
    const bit = reader.next();
    return bit === '0' || bit === '1' ? { type: 'boolean', value: bit } : 'A boolean must be ?0 or ?1.';
  }
  if (first === '@') {
    reader.next();
    const date = parseNumber(reader);
    return typeof date === 'string' || date.type !== 'integer'
      ? 'A date must be an integer.'
      : { ...date, type: 'date' };
  }
  if (first === '%') return parseDisplayString(reader);
  return first === '' ? 'The field is empty.' : `Unexpected ${JSON.stringify(first)} where a value starts.`;
}

/** RFC 9651 §4.2.5: sf-string, with `\"` and `\\` decoded. */
function parseString(reader: Reader): { type: 'string'; value: string } | string {
  reader.next();
  let value = '';
  for (;;) {
    if (reader.done) return 'The string is not terminated with ".';
    const char = reader.next();
    if (char === '"') return { type: 'string', value };
    if (char === '\\') {
      const escaped = reader.next();
      if (escaped !== '"' && escaped !== '\\') return 'Only \\" and \\\\ are escapes in a string.';
      value += escaped;
    } else if (char < ' ' || char > '~') {
      return 'A string may hold printable ASCII only (use a bare-ASCII key).';
    } else {
      value += char;
    }
  }
}

/** RFC 9651 §4.2.4: sf-integer or sf-decimal (their text: the key is never one). */
function parseNumber(reader: Reader): { type: 'integer' | 'decimal'; value: string } | string {
  let text = '';
  if (reader.peek() === '-') text += reader.next();
  if (!isDigit(reader.peek())) return 'A number must have a digit after its sign.';
  let type: 'integer' | 'decimal' = 'integer';
  for (;;) {
    const char = reader.peek();
    if (isDigit(char)) text += reader.next();
    else if (type === 'integer' && char === '.') {
      if (text.replace('-', '').length > 12) return 'A decimal has at most 12 integer digits.';
      text += reader.next();
      type = 'decimal';
    } else break;
    const digits = text.replace('-', '').length;
    if (type === 'integer' ? digits > 15 : digits > 16) return 'The number is too long.';
  }
  if (type === 'decimal' && (text.endsWith('.') || text.split('.')[1]!.length > 3)) {
    return 'A decimal has one to three fractional digits.';
  }
  return { type, value: text };
}

/** RFC 9651 §4.2.10: a display string (`%"..."`, percent-encoded UTF-8). */
function parseDisplayString(reader: Reader): { type: 'display string'; value: string } | string {
  reader.next();
  if (reader.next() !== '"') return 'A display string starts with %".';
  const bytes: number[] = [];
  for (;;) {
    if (reader.done) return 'The display string is not terminated with ".';
    const char = reader.next();
    if (char === '"') break;
    if (char < ' ' || char > '~') return 'A display string holds printable ASCII only.';
    if (char === '%') {
      const hex = reader.next() + reader.next();
      if (!/^[0-9a-f]{2}$/.test(hex)) return 'A display string escapes as % and two lower-case hex digits.';
      bytes.push(Number.parseInt(hex, 16));
    } else bytes.push(char.charCodeAt(0));
  }
  try {
    return {
      type: 'display string',
      value: new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(bytes)),
    };
  } catch {
    return 'A display string must be UTF-8.';
  }
}

function isDigit(char: string): boolean {
  return char >= '0' && char <= '9' && char.length === 1;
}

/** The input, consumed from the left; `peek()` and `next()` give '' past the end. */
class Reader {
  private position = 0;
  constructor(private readonly input: string) {}
  get done(): boolean {
    return this.position >= this.input.length;
  }
  peek(): string {
    return this.input[this.position] ?? '';
  }
  next(): string {
    return this.input[this.position++] ?? '';
  }
  skipSpaces(): void {
    while (this.peek() === ' ') this.position++;
  }
}
