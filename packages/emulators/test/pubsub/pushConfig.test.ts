import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientFor, codeOf, startEmulator, subscriberClientFor, uniqueName, waitFor } from './support.js';

// Push configs with the real client: stored and returned by CreateSubscription,
// ModifyPushConfig and UpdateSubscription, and an empty push config on a pull
// subscription, as the service returns one (the official samples read
// metadata.pushConfig). Delivery by HTTP POST is not emulated (docs/pubsub.md).

const INVALID_ARGUMENT = 3;
const FAILED_PRECONDITION = 9;

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

const endpoint = 'https://push.example.com/pubsub';

describe('push configs', () => {
  it('a pull subscription has an empty push config', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('pull'));
    const [subscription] = await topic.createSubscription(uniqueName('pull-sub'));
    const [metadata] = await subscription.getMetadata();
    expect(metadata.pushConfig).not.toBeNull();
    expect(metadata.pushConfig!.pushEndpoint).toBe('');
  });

  it('creates a push subscription and returns its config', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('push'));
    const [subscription] = await topic.createSubscription(uniqueName('push-sub'), {
      pushConfig: { pushEndpoint: endpoint, attributes: { 'x-goog-version': 'v1' } },
    });
    const [metadata] = await subscription.getMetadata();
    expect(metadata.pushConfig!.pushEndpoint).toBe(endpoint);
    expect(metadata.pushConfig!.attributes).toEqual({ 'x-goog-version': 'v1' });
  });

  it('changes it with ModifyPushConfig, back to pull with an empty one', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('modify'));
    const [subscription] = await topic.createSubscription(uniqueName('modify-sub'));
    await subscription.modifyPushConfig({ pushEndpoint: endpoint });
    expect((await subscription.getMetadata())[0].pushConfig!.pushEndpoint).toBe(endpoint);
    await subscription.modifyPushConfig({});
    expect((await subscription.getMetadata())[0].pushConfig!.pushEndpoint).toBe('');
  });

  it('changes it with UpdateSubscription', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('update'));
    const [subscription] = await topic.createSubscription(uniqueName('update-sub'));
    const [updated] = await subscription.setMetadata({ pushConfig: { pushEndpoint: endpoint } });
    expect(updated.pushConfig!.pushEndpoint).toBe(endpoint);
    expect((await subscription.getMetadata())[0].pushConfig!.pushEndpoint).toBe(endpoint);
  });

  it('refuses an endpoint that is not an http(s) URL', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('bad'));
    expect(
      await codeOf(
        topic.createSubscription(uniqueName('bad-sub'), { pushConfig: { pushEndpoint: 'not a url' } }),
      ),
    ).toBe(INVALID_ARGUMENT);
    const [subscription] = await topic.createSubscription(uniqueName('bad-sub'));
    expect(await codeOf(subscription.modifyPushConfig({ pushEndpoint: 'ftp://x.example.com' }))).toBe(
      INVALID_ARGUMENT,
    );
  });

  // The service refuses to be pulled from a push subscription ("This method is not
  // supported for push subscriptions.", FAILED_PRECONDITION): a consumer pointed at one
  // must fail here as it fails there, not receive its messages.
  it('refuses Pull and StreamingPull on a push subscription, and ends the streams of one made push', async () => {
    const [topic] = await pubsub.createTopic(uniqueName('no-pull'));
    const [push] = await topic.createSubscription(uniqueName('no-pull-push'), {
      pushConfig: { pushEndpoint: endpoint },
    });
    const client = subscriberClientFor(emulator);
    try {
      expect(await codeOf(client.pull({ subscription: push.name, maxMessages: 1 }))).toBe(
        FAILED_PRECONDITION,
      );
      const errors: Array<{ code?: number }> = [];
      push.on('error', (error) => errors.push(error));
      push.on('message', () => {});
      await waitFor(() => errors.length > 0, 30_000, 'the stream refused');
      expect(errors[0]!.code).toBe(FAILED_PRECONDITION);
      await push.close();

      // A pull subscription switched to push: its open streams end the same way.
      const [pull] = await topic.createSubscription(uniqueName('no-pull-switched'));
      const switched: Array<{ code?: number }> = [];
      pull.on('error', (error) => switched.push(error));
      pull.on('message', () => {});
      await waitFor(
        () => (emulator.inspectSubscription(pull.name)?.streams ?? 0) > 0,
        30_000,
        'its stream open',
      );
      await client.modifyPushConfig({ subscription: pull.name, pushConfig: { pushEndpoint: endpoint } });
      await waitFor(() => switched.length > 0, 30_000, 'its stream ended');
      expect(switched[0]!.code).toBe(FAILED_PRECONDITION);
      await pull.close();
    } finally {
      await client.close();
    }
  });
});
