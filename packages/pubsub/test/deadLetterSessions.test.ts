import { type PubSub, v1 } from '@google-cloud/pubsub';
import { DeadLetters, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import {
  DEAD_LETTER_ATTRIBUTES,
  DEAD_LETTER_SESSION_LEASE_SECONDS,
  deadLetterAttributes,
  openDeadLetters,
} from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture, unique } from './fixture.js';
import { adminClient, PROJECT, postgresAvailable, startEmulator } from './support.js';

// The Pub/Sub dead-letter session's paths besides the common one (deadLetters.test.ts):
// copies the subscription's dead-letter policy forwarded, copies whose attributes were
// folded for room, and leases held past the dead-letter subscription's ack deadline.
const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub?.close();
  await emulator?.stop();
});

describe.skipIf(!hasPostgres)('Pub/Sub dead-letter sessions (emulator + PostgreSQL)', () => {
  const fixtures: AdapterFixture[] = [];
  afterEach(async () => {
    for (const fixture of fixtures.splice(0)) await fixture.drop();
  });

  /** A dead-letter topic and its reading subscription, and a consumer fixture dead-lettering there. */
  async function setUp(label: string, policy = false) {
    const [deadTopic] = await pubsub.createTopic(unique(`${label}-dlt`));
    const [deadSubscription] = await deadTopic.createSubscription(unique(`${label}-dlt-sub`), {
      ackDeadlineSeconds: 10,
    });
    const fixture = await adapterFixture(
      pubsub,
      emulator,
      label,
      policy ? { deadLetterPolicy: { deadLetterTopic: deadTopic.name, maxDeliveryAttempts: 5 } } : {},
    );
    fixtures.push(fixture);
    const config = {
      name: label,
      broker: {
        ...fixture.broker,
        ...(policy ? {} : { deadLetterTopic: deadTopic.name }),
        deadLetterSubscription: deadSubscription.name,
      } as never,
      store: fixture.store,
      handler: async () => {},
      logger: silentLogger,
    };
    const view = (name: string) => emulator.inspectSubscription(name)!;
    return { fixture, deadTopic, deadSubscription, config, view };
  }

  it('lists and replays a copy the dead-letter policy forwarded, without its attributes', async () => {
    const { fixture, deadSubscription, config, view } = await setUp('dlq-policy', true);
    await fixture.topic.publishMessage({
      data: Buffer.from('{"n": 1}'),
      attributes: { 'message-id': 'policy-1', tenant: 't3' },
    });
    // Five deliveries given back (a consumer that crashed each time): the policy forwards it.
    const subscriber = new v1.SubscriberClient(pubsub.options as never);
    try {
      while (view(deadSubscription.name).ready === 0) {
        const [response] = await subscriber.pull({ subscription: fixture.subscriptionName, maxMessages: 10 });
        const ackIds = (response.receivedMessages ?? []).map((m) => m.ackId!);
        if (ackIds.length > 0) {
          await subscriber.modifyAckDeadline({
            subscription: fixture.subscriptionName,
            ackIds,
            ackDeadlineSeconds: 0,
          });
        }
      }
    } finally {
      await subscriber.close();
    }
    const dead = await DeadLetters.open(config);
    const { letters } = await dead.list();
    expect(letters).toHaveLength(1);
    expect(letters[0]).toMatchObject({
      messageId: 'policy-1',
      reason: 'broker-redrive',
      attempts: 5,
      attributes: { 'message-id': 'policy-1', tenant: 't3' },
    });
    expect(await dead.replay({ ids: ['policy-1'] })).toMatchObject({ replayed: ['policy-1'] });
    const back = view(fixture.subscriptionName).messages;
    expect(back.map((m) => [m.attributes, m.data.toString()])).toEqual([
      [{ 'message-id': 'policy-1', tenant: 't3' }, '{"n": 1}'],
    ]);
    expect(view(deadSubscription.name).messages).toHaveLength(0);
  }, 60_000);

  it('restores the attributes a full copy folded away, and its ordering key', async () => {
    const { fixture, deadTopic, deadSubscription, config, view } = await setUp('dlq-folded');
    const original: Record<string, string> = { 'message-id': 'full-1' };
    for (let i = 0; i < 99; i++) original[`attr-${String(i).padStart(2, '0')}`] = `v${i}`;
    const attributes = deadLetterAttributes(
      original,
      {
        reason: 'max-attempts',
        detail: 'boom',
        sourceMessageId: '77',
        sourceSubscription: fixture.subscriptionName,
        orderingKey: 'customer-9',
      },
      2,
      ['message-id'],
    );
    // The case under test: Oncely's information and some original attributes in one attribute.
    expect(Object.keys(attributes)).toHaveLength(100);
    expect(attributes['oncely-dead-letter']).toContain('"moved"');
    await deadTopic.publishMessage({ data: Buffer.from('{}'), attributes });
    await waitFor(() => view(deadSubscription.name).ready === 1, { description: 'the copy' });

    const dead = await DeadLetters.open(config);
    const { letters } = await dead.list();
    expect(letters).toMatchObject([{ messageId: 'full-1', reason: 'max-attempts', error: 'boom' }]);
    expect(letters[0]!.attributes).toEqual(original);
    await dead.replay({ ids: ['full-1'] });
    const [copy] = view(fixture.subscriptionName).messages;
    expect(copy!.attributes).toEqual(original);
    expect(copy!.orderingKey).toBe('customer-9');
  }, 60_000);

  it('holds its copies past the subscription’s ack deadline, renewed, and gives them back at close', async () => {
    const { deadTopic, deadSubscription, config, view } = await setUp('dlq-lease');
    for (let i = 0; i < 3; i++) {
      await deadTopic.publishMessage({ data: Buffer.from('{}'), attributes: { 'message-id': `held-${i}` } });
    }
    await waitFor(() => view(deadSubscription.name).ready === 3, { description: 'three copies' });
    const session = await openDeadLetters(config);
    try {
      expect(await session.read()).toHaveLength(3);
      const deadlines = () => view(deadSubscription.name).messages.map((m) => m.deadline ?? 0);
      const first = Math.min(...deadlines());
      // The subscription's 10 s would have them back within 10 s; the session holds them for its lease.
      expect(first).toBeGreaterThan(Date.now() + (DEAD_LETTER_SESSION_LEASE_SECONDS - 15) * 1000);
      // Renewed while the pass runs (every third of the lease).
      await waitFor(() => Math.min(...deadlines()) > first, {
        timeoutMs: DEAD_LETTER_SESSION_LEASE_SECONDS * 1000,
        description: 'the leases renewed',
      });
      expect(view(deadSubscription.name).outstanding).toBe(3);
    } finally {
      await session.close();
    }
    expect(view(deadSubscription.name)).toMatchObject({ ready: 3, outstanding: 0 });
  }, 120_000);

  it('ends a pass on a service that holds an empty Pull open (gRPC deadline), names given as IDs', async () => {
    // The service answers a Pull without messages only after a wait of its own.
    const holding = await startEmulator({ pullWaitMs: 120_000 });
    const client = adminClient(holding);
    try {
      const fixture = await adapterFixture(client, holding, 'dlq-hold');
      fixtures.push(fixture);
      const [deadTopic] = await client.createTopic(unique('dlq-hold-dlt'));
      const [deadSubscription] = await deadTopic.createSubscription(unique('dlq-hold-dlt-sub'));
      const { consumer, events } = fixture.consumer({
        broker: { deadLetterTopic: deadTopic.name },
        handler: async () => {},
      });
      await consumer.start();
      await fixture.topic.publishMessage({
        data: Buffer.from('not json'),
        attributes: { 'message-id': 'h-1' },
      });
      await waitFor(() => events.count('deadLettered', 'h-1') === 1, { description: 'dead-lettered' });
      const id = (name: string) => name.split('/').pop()!;
      const dead = await DeadLetters.open({
        name: 'dlq-hold',
        broker: {
          ...fixture.broker,
          subscription: id(fixture.subscriptionName),
          deadLetterTopic: id(deadTopic.name),
          deadLetterSubscription: id(deadSubscription.name),
        } as never,
        store: fixture.store,
        handler: async () => {},
        logger: silentLogger,
      });
      const started = Date.now();
      const { letters } = await dead.list();
      expect(letters).toMatchObject([{ messageId: 'h-1', reason: 'invalid-body' }]);
      // The last Pull's own deadline (3 s), not the service's 120 s.
      expect(Date.now() - started).toBeLessThan(30_000);
      expect(holding.inspectSubscription(deadSubscription.name)).toMatchObject({ ready: 1, outstanding: 0 });
    } finally {
      for (const fixture of fixtures.splice(0)) await fixture.drop();
      await client.close();
      await holding.stop();
    }
  }, 90_000);

  it('finds the project from the environment when the config names none (no projectId, IDs only)', async () => {
    const { fixture, deadTopic, deadSubscription, view } = await setUp('dlq-project');
    await deadTopic.publishMessage({
      data: Buffer.from('{}'),
      attributes: {
        'message-id': 'env-1',
        [DEAD_LETTER_ATTRIBUTES.reason]: 'max-attempts',
        [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: '5',
        [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: fixture.subscriptionName,
      },
    });
    await waitFor(() => view(deadSubscription.name).ready === 1, { description: 'the copy' });
    const id = (name: string) => name.split('/').pop()!;
    // The client's own resolution (GOOGLE_CLOUD_PROJECT here; the credentials in production).
    const saved = process.env.GOOGLE_CLOUD_PROJECT;
    process.env.GOOGLE_CLOUD_PROJECT = PROJECT;
    try {
      const dead = await DeadLetters.open({
        name: 'dlq-project',
        broker: {
          type: 'pubsub',
          apiEndpoint: emulator.address,
          subscription: id(fixture.subscriptionName),
          deadLetterTopic: id(deadTopic.name),
          deadLetterSubscription: id(deadSubscription.name),
        } as never,
        store: fixture.store,
        handler: async () => {},
        logger: silentLogger,
      });
      expect((await dead.list()).letters).toMatchObject([{ messageId: 'env-1', reason: 'max-attempts' }]);
      expect(await dead.replay({ ids: ['env-1'] })).toMatchObject({ replayed: ['env-1'] });
      expect(view(fixture.subscriptionName).messages.map((m) => m.attributes)).toEqual([
        { 'message-id': 'env-1' },
      ]);
    } finally {
      if (saved === undefined) delete process.env.GOOGLE_CLOUD_PROJECT;
      else process.env.GOOGLE_CLOUD_PROJECT = saved;
    }
  }, 60_000);
});
