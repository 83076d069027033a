import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { DEAD_LETTER_ATTRIBUTES, readDeadLetter } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, unique } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// A dead-letter copy must stay within Pub/Sub's limits, or the service refuses it every
// time and the message is never dead-lettered (an ackFailed per delivery, forever): at
// most 100 attributes, 1,024 bytes a value. The copy carried the original's attributes
// plus 4-5 of Oncely's, so 97-100 attributes broke it, and the failure detail was cut at
// 1,000 characters, which a non-ASCII error text turns into up to 3,000 bytes (issue 34,
// defect 11). The emulator refuses both as the service does.

const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

/** `count` attributes besides the message-id one. */
const attributes = (count: number) =>
  Object.fromEntries(
    Array.from({ length: count }, (_, i) => [`attr-${String(i).padStart(3, '0')}`, `v${i}`]),
  );

describe.skipIf(!hasPostgres)('dead-letter copies within Pub/Sub limits', () => {
  async function poisonRun(
    messages: Array<{ id: string; attributes: Record<string, string>; orderingKey?: string }>,
    error: string,
  ) {
    const fixture = await adapterFixture(pubsub, emulator, 'dl-limits');
    const [deadTopic] = await pubsub.createTopic(unique('dl-limits-dlq'));
    const [deadSubscription] = await deadTopic.createSubscription(unique('dl-limits-dlq-sub'));
    const { consumer, events } = fixture.consumer({
      broker: { deadLetterTopic: deadTopic.name },
      maxAttempts: 1,
      handler: async () => {
        throw new Error(error);
      },
    });
    try {
      await consumer.start();
      for (const message of messages) {
        await fixture.topic.publishMessage({
          data: Buffer.from('{}'),
          attributes: { 'message-id': message.id, ...message.attributes },
        });
      }
      await waitFor(() => messages.every((m) => events.count('deadLettered', m.id) === 1), {
        timeoutMs: 30_000,
        description: 'every message dead-lettered',
      });
      expect(events.count('ackFailed')).toBe(0);
      return emulator.inspectSubscription(deadSubscription.name)!.messages;
    } finally {
      await fixture.drop();
    }
  }

  it('dead-letters messages with 96 to 100 attributes, keeping every original one it can', async () => {
    const messages = [95, 96, 97, 98, 99].map((count) => ({
      id: `m${count + 1}`,
      attributes: attributes(count),
    }));
    const copies = await poisonRun(messages, 'always fails');
    expect(copies).toHaveLength(5);
    for (const copy of copies) {
      const id = copy.attributes['message-id']!;
      const original = { 'message-id': id, ...messages.find((m) => m.id === id)!.attributes };
      expect(Object.keys(copy.attributes).length, id).toBeLessThanOrEqual(100);
      const info = readDeadLetter(copy.attributes);
      expect(info?.reason, id).toBe('max-attempts');
      expect(info?.detail, id).toContain('always fails');
      // Every original attribute is still there, or moved whole into Oncely's.
      for (const [key, value] of Object.entries(original)) {
        const kept = copy.attributes[key] === value || info?.moved?.[key] === value;
        expect(kept, `${id}: ${key}`).toBe(true);
      }
    }
    // The one with 96 attributes still fits Oncely's 4 as attributes of their own.
    const roomy = copies.find((c) => c.attributes['message-id'] === 'm96')!;
    expect(roomy.attributes[DEAD_LETTER_ATTRIBUTES.reason]).toBe('max-attempts');
    // The full one (100) had to give up one attribute: moved, not lost.
    const full = copies.find((c) => c.attributes['message-id'] === 'm100')!;
    expect(Object.keys(full.attributes)).toHaveLength(100);
    expect(Object.keys(readDeadLetter(full.attributes)?.moved ?? {})).toHaveLength(1);
  });

  // A message near the 10 MB limit has no room for Oncely's attributes next to its own
  // data and attributes: the copy was refused every time (an ackFailed per delivery, the
  // message back every lease, never dead-lettered). The original's data and attributes
  // go first; Oncely's information takes what room is left, or none.
  it('dead-letters messages at and near the 10 MB limit, data and attributes intact', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'dl-10mb');
    const [deadTopic] = await pubsub.createTopic(unique('dl-10mb-dlq'));
    const [deadSubscription] = await deadTopic.createSubscription(unique('dl-10mb-dlq-sub'));
    const { consumer, events } = fixture.consumer({
      broker: { deadLetterTopic: deadTopic.name },
      maxAttempts: 1,
      handler: async () => {
        throw new Error(`poison ${'é'.repeat(1500)}`);
      },
    });
    const size = (attributes: Record<string, string>) =>
      Object.entries(attributes).reduce(
        (sum, [k, v]) => sum + Buffer.byteLength(k) + Buffer.byteLength(v),
        0,
      );
    const originals = [
      // Exactly 10,000,000 bytes: nothing of Oncely's fits.
      { 'message-id': 'full', note: 'keep me' },
      // 600 bytes left: the reason and source fit, the detail is cut to the room left.
      { 'message-id': 'nearly', note: 'keep me too' },
    ].map((attributes, i) => ({
      attributes,
      // A JSON string, so that the handler runs (and fails).
      data: Buffer.from(`"${'x'.repeat(10_000_000 - size(attributes) - (i === 0 ? 0 : 600) - 2)}"`),
    }));
    try {
      await consumer.start();
      for (const original of originals) await fixture.topic.publishMessage(original);
      await waitFor(
        () => events.count('deadLettered', 'full') === 1 && events.count('deadLettered', 'nearly') === 1,
        { timeoutMs: 30_000, description: 'both dead-lettered' },
      );
      expect(events.count('ackFailed')).toBe(0);
      const copies = emulator.inspectSubscription(deadSubscription.name)!.messages;
      for (const original of originals) {
        const id = original.attributes['message-id'];
        const copy = copies.find((c) => c.attributes['message-id'] === id)!;
        expect(copy.data.equals(original.data), id).toBe(true);
        expect(copy.attributes, id).toMatchObject(original.attributes);
        expect(copy.data.length + size(copy.attributes), id).toBeLessThanOrEqual(10_000_000);
      }
      const nearly = readDeadLetter(copies.find((c) => c.attributes['message-id'] === 'nearly')!.attributes);
      expect(nearly).toMatchObject({ reason: 'max-attempts', cut: ['detail'] });
      expect(nearly!.detail).toContain('poison é');
    } finally {
      await fixture.drop();
    }
  }, 90_000);

  it('cuts a non-ASCII failure detail to 1,024 bytes on a character boundary and says so', async () => {
    const error = `échec ${'é'.repeat(1500)}`;
    const [copy] = await poisonRun([{ id: 'accented', attributes: {} }], error);
    const detail = copy!.attributes[DEAD_LETTER_ATTRIBUTES.detail]!;
    expect(Buffer.byteLength(detail)).toBeLessThanOrEqual(1024);
    // The core's detail: 'failed 1 times; last error: Error: échec éé…'.
    expect(detail).toContain('Error: échec éé');
    expect(detail.endsWith('é…')).toBe(true);
    expect(detail).not.toContain('\uFFFD');
    expect(readDeadLetter(copy!.attributes)?.cut).toEqual(['detail']);
  });
});
