import { cutUtf8, DEAD_LETTER_ATTRIBUTES, deadLetterAttributes, readDeadLetter } from '@oncely/pubsub';
import { describe, expect, it } from 'vitest';

// The dead-letter copy's attributes alone (no broker): the byte-level edges the
// emulator test (deadLetterLimits.test.ts) does not reach.

const info = {
  reason: 'max-attempts',
  detail: 'boom',
  sourceMessageId: '42',
  sourceSubscription: 'projects/p/subscriptions/payments',
};
const attributes = (count: number, value = 'v') =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`k${String(i).padStart(3, '0')}`, value]));
const bytes = (text: string) => Buffer.byteLength(text);

describe('cutUtf8', () => {
  it('keeps text that fits, cuts on a character boundary with an ellipsis otherwise', () => {
    expect(cutUtf8('abc', 3)).toBe('abc');
    expect(cutUtf8('ééé', 5)).toBe('é…');
    // A 4-byte character (a surrogate pair in JS) is never split.
    expect(cutUtf8('😀😀', 6)).toBe('…');
    expect(cutUtf8('😀😀', 7)).toBe('😀…');
    expect(cutUtf8('😀😀', 8)).toBe('😀😀');
    expect(cutUtf8('x'.repeat(2000), 1024)).toHaveLength(1022);
    expect(bytes(cutUtf8('é'.repeat(2000), 1024))).toBeLessThanOrEqual(1024);
  });
});

describe('deadLetterAttributes', () => {
  it("adds Oncely's attributes of their own while the copy stays within 100", () => {
    const copy = deadLetterAttributes({ 'message-id': 'a', ...attributes(95) }, info, 2, ['message-id']);
    expect(Object.keys(copy)).toHaveLength(100);
    expect(copy[DEAD_LETTER_ATTRIBUTES.reason]).toBe('max-attempts');
    expect(readDeadLetter(copy)).toEqual({ ...info, cut: [] });
  });

  it('folds them into one attribute of at most 1,024 bytes beyond that, cutting the detail last', () => {
    const long = { ...info, detail: `"quoted" ${'é'.repeat(2000)}`, orderingKey: 'customer-7' };
    const copy = deadLetterAttributes({ 'message-id': 'a', ...attributes(97) }, long, 2, ['message-id']);
    expect(Object.keys(copy)).toHaveLength(99);
    expect(bytes(copy[DEAD_LETTER_ATTRIBUTES.folded]!)).toBeLessThanOrEqual(1024);
    const read = readDeadLetter(copy)!;
    expect(read.reason).toBe('max-attempts');
    expect(read.orderingKey).toBe('customer-7');
    expect(read.cut).toEqual(['detail']);
    expect(read.detail.startsWith('"quoted" éé')).toBe(true);
  });

  it('moves the smallest original attribute into its own when the original has 100, never the ID', () => {
    const original = { 'message-id': 'a', ...attributes(98), t: '1' };
    const copy = deadLetterAttributes(original, info, 2, ['message-id']);
    expect(Object.keys(copy)).toHaveLength(100);
    expect(copy['message-id']).toBe('a');
    expect(copy.t).toBeUndefined();
    expect(readDeadLetter(copy)).toMatchObject({ moved: { t: '1' }, cut: [] });
  });

  it("keeps every original attribute whole when Oncely's information has no room", () => {
    // 99 attributes near 1 KB and the ID: none moves whole into Oncely's attribute next
    // to the rest, so the copy carries the original's 100 attributes and nothing else.
    const big = 'x'.repeat(1000);
    const original = { 'message-id': 'a', ...attributes(99, big) };
    expect(deadLetterAttributes(original, info, 2, ['message-id'])).toEqual(original);
    expect(readDeadLetter(original)).toBeUndefined();
  });

  it("cuts Oncely's detail, never an original attribute, to stay within 10 MB", () => {
    const original = { 'message-id': 'a', big: 'y'.repeat(1000) };
    const dataBytes = 10_000_000 - 1500;
    const copy = deadLetterAttributes(original, { ...info, detail: 'z'.repeat(900) }, dataBytes, [
      'message-id',
    ]);
    const size =
      dataBytes + Object.entries(copy).reduce((sum, [key, value]) => sum + bytes(key) + bytes(value), 0);
    expect(size).toBeLessThanOrEqual(10_000_000);
    expect(copy).toMatchObject(original);
    const read = readDeadLetter(copy)!;
    expect(read).toMatchObject({ reason: 'max-attempts', sourceMessageId: '42', cut: ['detail'] });
    expect(read.detail.startsWith('zzz')).toBe(true);
  });

  it('carries the original attributes alone when the message is at the 10 MB limit', () => {
    const original = { 'message-id': 'a', note: 'n' };
    const dataBytes = 10_000_000 - bytes('message-ida') - bytes('noten');
    expect(deadLetterAttributes(original, info, dataBytes, ['message-id'])).toEqual(original);
  });
});
