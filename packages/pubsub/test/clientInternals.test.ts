import { PubSub, type Subscription } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { publishWithId } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture, recordingLogger } from './fixture.js';
import { adminClient, PROJECT, postgresAvailable, startEmulator } from './support.js';

// The adapter reads three internals of the client's subscriber (_inventory.remove,
// _modAcks, _discardMessage), none of them public API; each has a fallback for a client
// version that lacks it. This runs the adapter on a client whose subscription hides its
// subscriber, as such a version would: the fallbacks must be correct (every message
// processed once, a retry and a park honoured), if slower, and say once each that they
// are in use.

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

/** A client whose subscriptions answer `undefined` for `_subscriber` to everyone but themselves. */
function clientWithoutInternals(): PubSub {
  const client = new PubSub({ projectId: PROJECT, apiEndpoint: emulator.address });
  const subscription = client.subscription.bind(client);
  client.subscription = ((name: string, options?: Parameters<PubSub['subscription']>[1]) => {
    const target: Subscription = subscription(name, options);
    return new Proxy(target, {
      get(object, property) {
        if (property === '_subscriber') return undefined;
        // The subscription's own methods run on the real object, internals included.
        const value = Reflect.get(object, property, object);
        return typeof value === 'function' ? value.bind(object) : value;
      },
    });
  }) as PubSub['subscription'];
  return client;
}

describe.skipIf(!hasPostgres)("without the client's internals", () => {
  it('processes every message once, honours a retry and a park, and says which fallbacks run', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'no-internals');
    const client = clientWithoutInternals();
    const log = recordingLogger();
    const MESSAGES = 40;
    const { consumer, events } = fixture.consumer({
      broker: { client, projectId: undefined, apiEndpoint: undefined },
      concurrency: 2,
      maxAttempts: 3,
      backoff: { initialMs: 1_000, maxMs: 1_000 },
      logger: log,
      handler: async (message, ctx) => {
        if (message.id === 'flaky' && ctx.attempt === 1) throw new Error('first attempt fails');
      },
    });
    const view = () => emulator.inspectSubscription(fixture.subscriptionName)!;
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'flaky', body: {} });
      // No message-id attribute and no dead-letter topic: parked.
      await fixture.topic.publishMessage({ data: Buffer.from('{}'), attributes: { poison: 'yes' } });
      for (let i = 0; i < MESSAGES; i++) await publishWithId(fixture.topic, { id: `m${i}`, body: {} });
      await waitFor(() => events.count('processed') === MESSAGES + 1, {
        timeoutMs: 120_000,
        intervalMs: 200,
        description: 'every message processed',
      });
      expect(events.count('duplicate')).toBe(0);
      expect(events.count('received', 'flaky')).toBe(2);
      expect(events.count('retried', 'flaky')).toBe(1);
      // The park held: the receipt modAck (the lease) did not overwrite it.
      const parked = view().messages.find((m) => m.attributes.poison === 'yes')!;
      expect(parked.deliveries).toBe(1);
      expect(parked.deadline! - Date.now()).toBeGreaterThan(500_000);
      const warnings = log.lines.filter(
        (l) => l.level === 'warn' && l.message.includes('@google-cloud/pubsub'),
      );
      expect(
        warnings
          .map((l) => l.message.match(/hides (its modAck queue|the subscriber's inventory)/)?.[1])
          .sort(),
      ).toEqual(['its modAck queue', "the subscriber's inventory"]);
    } finally {
      await fixture.drop();
      await client.close();
    }
  }, 180_000);
});
