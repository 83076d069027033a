import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { publishWithId, readDeadLetter } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, unique } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// Ordering keys with a failing message in the middle: on an ordering subscription a
// message retried (by delay or by the service's retry policy) or dead-lettered must not
// let any later message of its key run before it, every later message must still run
// once, in order, and the other keys must not wait for it.

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

const KEYS = ['A', 'B', 'C'];
const PER_KEY = 6;

describe.skipIf(!hasPostgres)('ordering keys with a failing message in the middle', () => {
  for (const variant of ['delayed retry', 'retry policy', 'exactly-once'] as const) {
    it(`${variant}: later messages of the key run only after it, once each, in order`, async () => {
      const fixture = await adapterFixture(pubsub, emulator, 'ordering', {
        enableMessageOrdering: true,
        ...(variant === 'retry policy'
          ? { retryPolicy: { minimumBackoff: { seconds: 1 }, maximumBackoff: { seconds: 2 } } }
          : {}),
        ...(variant === 'exactly-once' ? { enableExactlyOnceDelivery: true } : {}),
      });
      const [deadTopic] = await pubsub.createTopic(unique('ordering-dlq'));
      const [deadSubscription] = await deadTopic.createSubscription(unique('ordering-dlq-sub'));
      const runs: Record<string, string[]> = { A: [], B: [], C: [] };
      const commits: Record<string, string[]> = { A: [], B: [], C: [] };
      const { consumer, events } = fixture.consumer({
        broker: { deadLetterTopic: deadTopic.name },
        concurrency: 4,
        maxAttempts: 3,
        backoff: { initialMs: 500, maxMs: 1_000 },
        handler: async (message, ctx) => {
          const key = message.orderingKey!;
          runs[key]!.push(`${message.id}#${ctx.attempt}`);
          // A3 fails twice, then succeeds; B2 always fails (dead-lettered after 3).
          if (message.id === 'A3' && ctx.attempt <= 2) throw new Error('A3 not yet');
          if (message.id === 'B2') throw new Error('B2 is poison');
          await ctx.tx.query(`INSERT INTO "${fixture.schema}".effects (id) VALUES ($1)`, [message.id]);
          commits[key]!.push(message.id);
        },
      });
      try {
        await consumer.start();
        for (let i = 1; i <= PER_KEY; i++) {
          await Promise.all(
            KEYS.map((key) => publishWithId(fixture.topic, { id: `${key}${i}`, body: {}, orderingKey: key })),
          );
        }
        await waitFor(
          () =>
            commits.A!.length === PER_KEY &&
            commits.B!.length === PER_KEY - 1 &&
            commits.C!.length === PER_KEY &&
            events.count('deadLettered', 'B2') === 1,
          { timeoutMs: 60_000, description: 'every key done' },
        );
        const ids = (key: string, skip?: number) =>
          Array.from({ length: PER_KEY }, (_, i) => `${key}${i + 1}`).filter((_, i) => i + 1 !== skip);
        expect(commits).toEqual({ A: ids('A'), B: ids('B', 2), C: ids('C') });
        // Handler runs, in order: nothing of a key ran ahead of its failing message.
        expect(runs.A).toEqual(['A1#1', 'A2#1', 'A3#1', 'A3#2', 'A3#3', 'A4#1', 'A5#1', 'A6#1']);
        expect(runs.B).toEqual(['B1#1', 'B2#1', 'B2#2', 'B2#3', 'B3#1', 'B4#1', 'B5#1', 'B6#1']);
        expect(runs.C).toEqual(ids('C').map((id) => `${id}#1`));
        await waitFor(
          () => (emulator.inspectSubscription(deadSubscription.name)?.messages.length ?? 0) === 1,
          {
            description: 'B2 dead-lettered',
          },
        );
        const copy = emulator.inspectSubscription(deadSubscription.name)!.messages[0]!;
        expect(readDeadLetter(copy.attributes)).toMatchObject({ reason: 'max-attempts', orderingKey: 'B' });
        await waitFor(
          () => {
            const view = emulator.inspectSubscription(fixture.subscriptionName)!;
            return view.ready + view.outstanding + view.acked === 0;
          },
          { timeoutMs: 30_000, description: 'every message settled' },
        );
        expect(events.count('ackFailed')).toBe(0);
      } finally {
        await fixture.drop();
      }
    }, 90_000);
  }
});
