import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { clientFor, collect, PROJECT, startEmulator, uniqueName, waitFor } from './support.js';

// What users do with the official samples, with the real client: the quickstart with
// only PUBSUB_EMULATOR_HOST set (in a child process, so this process's environment is
// never touched), and batched publishing.

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

it('runs the quickstart with nothing but PUBSUB_EMULATOR_HOST', async () => {
  const child = fileURLToPath(new URL('./quickstartChild.mjs', import.meta.url));
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [child, uniqueName('topic'), uniqueName('sub')],
    {
      env: { ...process.env, PUBSUB_EMULATOR_HOST: emulator.address, PUBSUB_PROJECT_ID: PROJECT },
      timeout: 20_000,
    },
  );
  expect(stdout.trim()).toBe('Test message!');
});

it('accepts batched publishing (up to 10 messages per Publish request)', async () => {
  const [topic] = await pubsub.createTopic(uniqueName('topic'));
  const [subscription] = await topic.createSubscription(uniqueName('sub'));
  topic.setPublishOptions({ batching: { maxMessages: 10, maxMilliseconds: 50 } });
  const received = collect(subscription, (m) => m.ack());
  const ids = await Promise.all(
    Array.from({ length: 25 }, (_, n) => topic.publishMessage({ data: Buffer.from(`m${n}`) })),
  );
  expect(new Set(ids).size).toBe(25);
  await waitFor(() => received.length === 25);
  expect(new Set(received.map((m) => m.id))).toEqual(new Set(ids));
  await subscription.close();
});

it('serves requests as soon as start resolves', async () => {
  // No wall-clock bound (it was < 1000 ms, which a loaded machine exceeds): how fast the
  // emulator starts is a speed claim, not something a test on a shared machine can hold.
  // What a test can hold: once start() resolved, the emulator answers, with no retry.
  const own = await startEmulator();
  const ownPubSub = clientFor(own);
  try {
    const [topic] = await ownPubSub.createTopic(uniqueName('topic'));
    expect(topic.name).toContain('topics/');
  } finally {
    await ownPubSub.close();
    await own.stop();
  }
});
