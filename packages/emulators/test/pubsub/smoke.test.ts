import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { clientFor, collect, startEmulator, uniqueName, waitFor } from './support.js';

let emulator: PubSubEmulator;
beforeAll(async () => {
  emulator = await startEmulator();
});
afterAll(async () => {
  await emulator.stop();
});

it('smoke', async () => {
  const pubsub = clientFor(emulator);
  const [topic] = await pubsub.createTopic(uniqueName('t'));
  const [sub] = await topic.createSubscription(uniqueName('s'));
  const got = collect(sub, (m) => m.ack());
  await topic.publishMessage({ data: Buffer.from('hello'), attributes: { a: '1' } });
  await waitFor(() => got.length === 1);
  expect(got[0]!.data.toString()).toBe('hello');
  await sub.close();
  await pubsub.close();
});
