import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { clientFor, codeOf, startEmulator, uniqueName } from './support.js';

// Subscription filters with the real client: the documented syntax, applied when a
// message is published (what createSubscriptionWithFiltering sets up).

let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = clientFor(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

const messages: Array<Record<string, string>> = [
  { author: 'unknown' },
  { author: 'alice', lang: 'en' },
  { author: 'bob', lang: 'fr-CA' },
  { lang: 'fr' },
  { priority: 'high', author: 'unknown' },
];

// [filter, indexes of `messages` it lets through]
const cases: Array<[string, number[]]> = [
  ['attributes.author = "unknown"', [0, 4]],
  ['attributes.author != "unknown"', [1, 2, 3]],
  ['attributes:lang', [1, 2, 3]],
  ['NOT attributes:lang', [0, 4]],
  ['-attributes:author', [3]],
  ['hasPrefix(attributes.lang, "fr")', [2, 3]],
  ['attributes.author = "alice" OR attributes.author = "bob"', [1, 2]],
  ['attributes:author AND attributes:lang', [1, 2]],
  ['(attributes.author = "unknown" OR attributes.lang = "fr") AND NOT attributes:priority', [0, 3]],
  ['NOT (attributes.author = "alice" OR hasPrefix(attributes.lang, "fr"))', [0, 4]],
];

it('delivers to a filtered subscription only the messages its filter matches', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const subscriptions = await Promise.all(
    cases.map(async ([filter]) => (await topic.createSubscription(uniqueName('sub'), { filter }))[0]),
  );
  const [all] = await topic.createSubscription(uniqueName('sub'));
  for (const [n, attributes] of messages.entries()) {
    await topic.publishMessage({ data: Buffer.from(String(n)), attributes });
  }
  for (const [i, subscription] of subscriptions.entries()) {
    const [metadata] = await subscription.getMetadata();
    expect(metadata.filter).toBe(cases[i]![0]);
    const view = emulator.inspectSubscription(subscription.name)!;
    const got = view.messages.map((m) => Number(m.data.toString())).sort();
    expect(got, cases[i]![0]).toEqual(cases[i]![1]);
  }
  expect(emulator.inspectSubscription(all.name)!.ready).toBe(messages.length);
});

it('refuses a filter that is not valid with INVALID_ARGUMENT', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  for (const filter of ['attributes.author = unknown', 'author = "x"', '(attributes:a', 'x'.repeat(300)]) {
    expect(await codeOf(topic.createSubscription(uniqueName('sub'), { filter })), filter).toBe(3);
  }
});
