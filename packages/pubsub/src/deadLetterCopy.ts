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
   * What was cut to stay within Pub/Sub's limits: `detail`, `orderingKey` (shortened),
   * `attribute:<key>` (an original attribute left out of the copy, its value lost unless
   * it is in `moved`).
   */
  cut: string[];
  /** Original attributes that did not fit as attributes, kept here instead. */
  moved?: Record<string, string>;
}

/**
 * The attributes of the dead-letter copy of a message: the original's, plus Oncely's
 * reason, detail and source, within Pub/Sub's limits (100 attributes, 1,024 bytes a
 * value, 10 MB a message). Values are cut on a UTF-8 character boundary; when Oncely's
 * would push the count over 100 they are folded into one attribute; when even that does
 * not fit (an original with 100 attributes), the smallest original attributes other
 * than `protectedKeys` (the ID attribute) leave the copy, moved into Oncely's attribute
 * where they fit. Whatever was cut is named in the copy.
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

  const separate = separateAttributes(info);
  const first = { ...kept, ...separate };
  if (fits(first, dataBytes)) return first;

  // Fold Oncely's into one attribute; drop original attributes (smallest first, never a
  // protected one) until the copy fits.
  const droppable = Object.keys(kept)
    .filter((key) => !protectedKeys.includes(key))
    .sort((a, b) => entryBytes(a, kept[a]!) - entryBytes(b, kept[b]!) || a.localeCompare(b));
  const dropped: string[] = [];
  for (;;) {
    const rest = { ...kept };
    for (const key of dropped) delete rest[key];
    const candidate = { ...rest, [DEAD_LETTER_ATTRIBUTES.folded]: foldedAttribute(info, dropped, kept) };
    const next = droppable[dropped.length];
    // Nothing left to drop: this is as small as it gets (the service decides).
    if (fits(candidate, dataBytes) || next === undefined) return candidate;
    dropped.push(next);
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
    try {
      const parsed = JSON.parse(folded) as DeadLetterInfo;
      return { ...parsed, cut: parsed.cut ?? [] };
    } catch {
      return undefined;
    }
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
 * Oncely's information as one JSON attribute of at most 1,024 bytes: the reason and the
 * source first, then what was cut, the ordering key, the dropped attributes that fit
 * whole, and the detail in whatever room is left.
 */
function foldedAttribute(
  info: Omit<DeadLetterInfo, 'cut' | 'moved'>,
  dropped: readonly string[],
  original: Readonly<Record<string, string>>,
): string {
  const base = {
    reason: info.reason,
    sourceMessageId: info.sourceMessageId,
    sourceSubscription: info.sourceSubscription,
  };
  const cut: string[] = [];
  const moved: Record<string, string> = {};
  const compose = (detail: string, orderingKey?: string) =>
    JSON.stringify({
      ...base,
      ...(orderingKey !== undefined ? { orderingKey } : {}),
      detail,
      cut,
      ...(Object.keys(moved).length > 0 ? { moved } : {}),
    });
  const size = (detail: string, orderingKey?: string) => Buffer.byteLength(compose(detail, orderingKey));
  // Every dropped attribute is named as cut until it is moved; the names come first.
  for (const key of dropped) cut.push(`attribute:${key}`);
  let orderingKey = info.orderingKey || undefined;
  if (orderingKey !== undefined && size('', orderingKey) > MAX_ATTRIBUTE_VALUE_BYTES) {
    cut.push('orderingKey');
    orderingKey = fitInto(orderingKey, (text) => size('', text));
  }
  for (const key of dropped) {
    moved[key] = original[key]!;
    cut.splice(cut.indexOf(`attribute:${key}`), 1);
    if (size('', orderingKey) > MAX_ATTRIBUTE_VALUE_BYTES) {
      delete moved[key];
      cut.unshift(`attribute:${key}`);
    }
  }
  let detail = info.detail;
  if (size(detail, orderingKey) > MAX_ATTRIBUTE_VALUE_BYTES) {
    cut.push('detail');
    detail = fitInto(detail, (text) => size(text, orderingKey));
  }
  return compose(detail, orderingKey);
}

/**
 * The longest cut of `text` (cutUtf8) whose `measure` is within the attribute limit:
 * JSON escapes make the encoded size grow faster than the text, so it is searched for.
 */
function fitInto(text: string, measure: (candidate: string) => number): string {
  let low = 0;
  let high = Buffer.byteLength(text);
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (measure(cutUtf8(text, mid)) <= MAX_ATTRIBUTE_VALUE_BYTES) low = mid;
    else high = mid - 1;
  }
  return cutUtf8(text, low);
}

function entryBytes(key: string, value: string): number {
  return Buffer.byteLength(key) + Buffer.byteLength(value);
}

function fits(attributes: Readonly<Record<string, string>>, dataBytes: number): boolean {
  const entries = Object.entries(attributes);
  if (entries.length > MAX_ATTRIBUTES) return false;
  let bytes = dataBytes;
  for (const [key, value] of entries) {
    if (Buffer.byteLength(value) > MAX_ATTRIBUTE_VALUE_BYTES) return false;
    bytes += entryBytes(key, value);
  }
  return bytes <= MAX_MESSAGE_BYTES;
}
