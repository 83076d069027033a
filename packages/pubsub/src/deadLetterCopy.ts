import type { DeadLetterReason } from '@oncely/core';

/** Pub/Sub's limits for one published message (quotas, "Resource limits"). */
const MAX_ATTRIBUTES = 100;
const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
/** Data, attribute keys and values, and ordering key. */
const MAX_MESSAGE_BYTES = 10_000_000;
const ELLIPSIS = '…';

/**
 * Attributes of a dead-lettered copy. Oncely adds the first four (and the ordering key,
 * when the original had one) as attributes of their own while the copy stays within 100
 * attributes; otherwise it folds them into the one `oncely-dead-letter` attribute, a JSON
 * object (see {@link readDeadLetter}). `oncely-dead-letter-truncated` (a JSON array)
 * names what was cut to stay within Pub/Sub's limits.
 *
 * @example
 * ```ts
 * const reason = deadLetter.attributes[DEAD_LETTER_ATTRIBUTES.reason]; // 'max-attempts'
 * ```
 */
export const DEAD_LETTER_ATTRIBUTES = {
  reason: 'oncely-dead-letter-reason',
  detail: 'oncely-dead-letter-detail',
  sourceMessageId: 'oncely-source-message-id',
  sourceSubscription: 'oncely-source-subscription',
  orderingKey: 'oncely-ordering-key',
  truncated: 'oncely-dead-letter-truncated',
  folded: 'oncely-dead-letter',
} as const;

/**
 * Why and from where a message was dead-lettered, as {@link readDeadLetter} reads it
 * back from a copy's attributes.
 */
export interface DeadLetterInfo {
  reason: DeadLetterReason | string;
  detail: string;
  sourceMessageId: string;
  sourceSubscription: string;
  orderingKey?: string;
  /**
   * What of Oncely's was cut to stay within Pub/Sub's limits: `detail`, `orderingKey`
   * (shortened). The original's own attributes are never cut (see `moved`).
   */
  cut: string[];
  /** Original attributes that did not fit as attributes (an original with 100), kept here whole. */
  moved?: Record<string, string>;
}

/**
 * The attributes of the dead-letter copy of a message: the original's, plus Oncely's
 * reason, detail and source, within Pub/Sub's limits (100 attributes, 1,024 bytes a
 * value, 10 MB a message). The original's data and attributes come first: Oncely's
 * information takes the room that is left. Values are cut on a UTF-8 character boundary;
 * when Oncely's would push the count over 100 they are folded into one attribute, its
 * detail cut to the bytes left in the message; when the original already has 100
 * attributes, its smallest ones other than `protectedKeys` (the ID attribute) move,
 * whole, into that attribute. When Oncely's information does not fit even so (a message
 * at the 10 MB limit; attributes too large to move whole), the copy carries the
 * original's attributes alone, and {@link readDeadLetter} finds nothing in it: the
 * reason is in the consumer's log and `deadLettered` event. Whatever of Oncely's was cut
 * is named in the copy.
 *
 * @example
 * ```ts
 * const attributes = deadLetterAttributes(message.attributes, info, message.data.length, ['message-id']);
 * ```
 */
export function deadLetterAttributes(
  original: Readonly<Record<string, string>>,
  info: Omit<DeadLetterInfo, 'cut' | 'moved'>,
  dataBytes: number,
  protectedKeys: readonly string[],
): Record<string, string> {
  const ours = new Set<string>(Object.values(DEAD_LETTER_ATTRIBUTES));
  const kept: Record<string, string> = {};
  for (const [key, value] of Object.entries(original)) if (!ours.has(key)) kept[key] = value;

  const separate = { ...kept, ...separateAttributes(info) };
  if (fits(separate, dataBytes)) return separate;

  // One attribute of Oncely's, in the room left; on a full original, move its smallest
  // attributes (never a protected one) into it until the count allows one more.
  const movable = Object.keys(kept)
    .filter((key) => !protectedKeys.includes(key))
    .sort((a, b) => entryBytes(a, kept[a]!) - entryBytes(b, kept[b]!) || a.localeCompare(b));
  const moved: string[] = [];
  for (;;) {
    const rest = { ...kept };
    for (const key of moved) delete rest[key];
    if (Object.keys(rest).length < MAX_ATTRIBUTES) {
      const room = Math.min(
        MAX_ATTRIBUTE_VALUE_BYTES,
        MAX_MESSAGE_BYTES -
          dataBytes -
          attributesBytes(rest) -
          Buffer.byteLength(DEAD_LETTER_ATTRIBUTES.folded),
      );
      const folded = foldedAttribute(info, moved, kept, room);
      // No room for Oncely's information: the original's attributes, whole, are worth more.
      return folded === undefined ? kept : { ...rest, [DEAD_LETTER_ATTRIBUTES.folded]: folded };
    }
    const next = movable[moved.length];
    if (next === undefined) return kept;
    moved.push(next);
  }
}

/**
 * Reads Oncely's dead-letter information back from a copy's attributes, in either form
 * (attributes of their own, or folded into `oncely-dead-letter`). Undefined when the
 * message was not dead-lettered by Oncely (a dead-letter policy forwarded it).
 *
 * @example
 * ```ts
 * const info = readDeadLetter(message.attributes);
 * if (info) console.log(info.reason, info.detail, info.cut);
 * ```
 */
export function readDeadLetter(attributes: Readonly<Record<string, string>>): DeadLetterInfo | undefined {
  const folded = attributes[DEAD_LETTER_ATTRIBUTES.folded];
  if (folded !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(folded);
    } catch {
      return undefined;
    }
    return foldedInfo(parsed);
  }
  const reason = attributes[DEAD_LETTER_ATTRIBUTES.reason];
  if (reason === undefined) return undefined;
  let cut: string[] = [];
  try {
    cut = JSON.parse(attributes[DEAD_LETTER_ATTRIBUTES.truncated] ?? '[]') as string[];
  } catch {
    cut = [];
  }
  const orderingKey = attributes[DEAD_LETTER_ATTRIBUTES.orderingKey];
  return {
    reason,
    detail: attributes[DEAD_LETTER_ATTRIBUTES.detail] ?? '',
    sourceMessageId: attributes[DEAD_LETTER_ATTRIBUTES.sourceMessageId] ?? '',
    sourceSubscription: attributes[DEAD_LETTER_ATTRIBUTES.sourceSubscription] ?? '',
    ...(orderingKey !== undefined ? { orderingKey } : {}),
    cut,
  };
}

/**
 * `text` cut to at most `maxBytes` of UTF-8, on a character boundary, ending with `…`
 * when it was cut.
 *
 * @example
 * ```ts
 * cutUtf8('ééé', 5); // 'é…' (2 + 3 bytes)
 * ```
 */
export function cutUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  const room = maxBytes - Buffer.byteLength(ELLIPSIS);
  if (room <= 0) return '';
  let bytes = 0;
  let end = 0;
  // By code point: a surrogate pair is one character (4 bytes) and is never split.
  for (const char of text) {
    const size = Buffer.byteLength(char);
    if (bytes + size > room) break;
    bytes += size;
    end += char.length;
  }
  return `${text.slice(0, end)}${ELLIPSIS}`;
}

function separateAttributes(info: Omit<DeadLetterInfo, 'cut' | 'moved'>): Record<string, string> {
  const cut: string[] = [];
  const value = (name: string, text: string) => {
    const fitted = cutUtf8(text, MAX_ATTRIBUTE_VALUE_BYTES);
    if (fitted !== text) cut.push(name);
    return fitted;
  };
  const attributes: Record<string, string> = {
    [DEAD_LETTER_ATTRIBUTES.reason]: value('reason', info.reason),
    ...(info.detail ? { [DEAD_LETTER_ATTRIBUTES.detail]: value('detail', info.detail) } : {}),
    [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: value('sourceMessageId', info.sourceMessageId),
    [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: value('sourceSubscription', info.sourceSubscription),
    // Publishing with an ordering key needs ordering on the publisher; the key is kept
    // as an attribute instead.
    ...(info.orderingKey
      ? { [DEAD_LETTER_ATTRIBUTES.orderingKey]: value('orderingKey', info.orderingKey) }
      : {}),
  };
  if (cut.length > 0) attributes[DEAD_LETTER_ATTRIBUTES.truncated] = JSON.stringify(cut);
  return attributes;
}

/**
 * Oncely's information as one JSON attribute of at most `room` bytes: the reason and the
 * source first, the moved original attributes (whole, or nothing fits), the ordering key
 * (cut if it must be), and the detail in whatever room is left. Undefined when the
 * reason, the source and the moved attributes alone take more than `room`.
 */
function foldedAttribute(
  info: Omit<DeadLetterInfo, 'cut' | 'moved'>,
  movedKeys: readonly string[],
  original: Readonly<Record<string, string>>,
  room: number,
): string | undefined {
  const base = {
    reason: info.reason,
    sourceMessageId: info.sourceMessageId,
    sourceSubscription: info.sourceSubscription,
  };
  const cut: string[] = [];
  const moved: Record<string, string> = {};
  for (const key of movedKeys) moved[key] = original[key]!;
  const compose = (detail: string, orderingKey?: string) =>
    JSON.stringify({
      ...base,
      ...(orderingKey !== undefined ? { orderingKey } : {}),
      detail,
      cut,
      ...(movedKeys.length > 0 ? { moved } : {}),
    });
  const size = (detail: string, orderingKey?: string) => Buffer.byteLength(compose(detail, orderingKey));
  let orderingKey = info.orderingKey || undefined;
  if (orderingKey !== undefined && size('', orderingKey) > room) {
    cut.push('orderingKey');
    orderingKey = fitInto(orderingKey, room, (text) => size('', text));
  }
  let detail = info.detail;
  if (size(detail, orderingKey) > room) {
    cut.push('detail');
    detail = fitInto(detail, room, (text) => size(text, orderingKey));
  }
  const value = compose(detail, orderingKey);
  return Buffer.byteLength(value) <= room ? value : undefined;
}

/**
 * The longest cut of `text` (cutUtf8) whose `measure` is within `room`: JSON escapes make
 * the encoded size grow faster than the text, so it is searched for.
 */
function fitInto(text: string, room: number, measure: (candidate: string) => number): string {
  let low = 0;
  let high = Buffer.byteLength(text);
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (measure(cutUtf8(text, mid)) <= room) low = mid;
    else high = mid - 1;
  }
  return cutUtf8(text, low);
}

function entryBytes(key: string, value: string): number {
  return Buffer.byteLength(key) + Buffer.byteLength(value);
}

function attributesBytes(attributes: Readonly<Record<string, string>>): number {
  let bytes = 0;
  for (const [key, value] of Object.entries(attributes)) bytes += entryBytes(key, value);
  return bytes;
}

function fits(attributes: Readonly<Record<string, string>>, dataBytes: number): boolean {
  const entries = Object.entries(attributes);
  if (entries.length > MAX_ATTRIBUTES) return false;
  if (entries.some(([, value]) => Buffer.byteLength(value) > MAX_ATTRIBUTE_VALUE_BYTES)) return false;
  return dataBytes + attributesBytes(attributes) <= MAX_MESSAGE_BYTES;
}

/**
 * The folded attribute as Oncely wrote it, read defensively: anyone who can publish to the
 * dead-letter topic can put anything there, and a replay must not publish a value that is
 * not a string (`[object Object]`) or a string's letters as attributes, nor a listing fail
 * on a reason or detail that is not text. Fields of the wrong type are left out; a reason
 * that is not text reads as `unknown`.
 */
function foldedInfo(parsed: unknown): DeadLetterInfo | undefined {
  if (!isRecord(parsed)) return undefined;
  const text = (value: unknown) => (typeof value === 'string' ? value : '');
  const moved = isRecord(parsed.moved)
    ? Object.fromEntries(Object.entries(parsed.moved).filter((entry) => typeof entry[1] === 'string'))
    : undefined;
  return {
    reason: text(parsed.reason) || 'unknown',
    detail: text(parsed.detail),
    sourceMessageId: text(parsed.sourceMessageId),
    sourceSubscription: text(parsed.sourceSubscription),
    ...(typeof parsed.orderingKey === 'string' ? { orderingKey: parsed.orderingKey } : {}),
    cut: Array.isArray(parsed.cut) ? parsed.cut.filter((c): c is string => typeof c === 'string') : [],
    ...(moved ? { moved: moved as Record<string, string> } : {}),
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
