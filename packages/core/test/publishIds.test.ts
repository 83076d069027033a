/**
 * The IDs `ctx.publish` derives and the bodies it stores (#26, D4 and D5). Before the fix
 * the default ID was `${consumer}:${messageId}:${n}` verbatim, so `orders:eu` + `x` and
 * `orders` + `eu:x` both gave `orders:eu:x:1` and the outbox kept only the first body; and
 * an ArrayBuffer or a DataView body was stored as the JSON text "{}".
 */
import { describe, expect, it } from 'vitest';
import type { OutboxWrite } from '../src/index.js';
import { defaultPublishId, encodeOutboxBody, silentLogger } from '../src/index.js';
import { MessageContext } from '../src/pipeline/messageContext.js';
import type { IdempotencyStore } from '../src/types.js';

/** A store whose outbox keeps the rows it was given (the ID derivation is what is tested). */
function recordingStore(rows: OutboxWrite[]): IdempotencyStore<object> {
  return {
    outbox: {
      async write(_tx: object, message: OutboxWrite) {
        rows.push(message);
      },
    },
  } as unknown as IdempotencyStore<object>;
}

async function publishedId(consumer: string, messageId: string): Promise<string> {
  const rows: OutboxWrite[] = [];
  const ctx = new MessageContext(
    consumer,
    messageId,
    {},
    1,
    undefined as never,
    recordingStore(rows),
    silentLogger,
  );
  return ctx.publish('q', { from: consumer });
}

describe('default publish IDs', () => {
  it('differ for names that only differ in where a ":" falls', async () => {
    const a = await publishedId('orders:eu', 'x');
    const b = await publishedId('orders', 'eu:x');
    expect(a).not.toBe(b);
    expect([a, b]).toEqual(['orders%3Aeu:x:1', 'orders:eu%3Ax:1']);
    // The escape character itself is escaped, so an escaped-looking name stays distinct.
    expect(await publishedId('orders%3Aeu', 'x')).toBe('orders%253Aeu:x:1');
  });

  it('are not used up by a publish that is refused', async () => {
    const ctx = new MessageContext('c', 'm', {}, 1, undefined as never, recordingStore([]), silentLogger);
    await expect(ctx.publish('', {})).rejects.toThrow(/destination/);
    await expect(ctx.publish('q', {}, { key: 'k\0' })).rejects.toThrow(/NUL/);
    expect(await ctx.publish('q', {})).toBe('c:m:1');
  });

  it('are unchanged for names without ":" or "%" (safe across an upgrade)', async () => {
    expect(await publishedId('payments', 'm-1')).toBe('payments:m-1:1');
    expect(defaultPublishId('payments', 'arn/with spaces+0', 3)).toBe('payments:arn/with spaces+0:3');
  });
});

describe('outbox bodies', () => {
  it('sends an ArrayBuffer, a DataView and any typed array as their bytes', () => {
    const bytes = Uint8Array.from([0, 1, 2, 250, 255]);
    const text = (body: Uint8Array) => Array.from(body).join(',');
    expect(text(encodeOutboxBody(bytes.buffer))).toBe('0,1,2,250,255');
    expect(text(encodeOutboxBody(new DataView(bytes.buffer, 1, 3)))).toBe('1,2,250');
    expect(text(encodeOutboxBody(new Int16Array([1, -1])))).toBe('1,0,255,255');
    expect(text(encodeOutboxBody(Buffer.from('hi')))).toBe('104,105');
  });
});
