import type { PubSub } from '@google-cloud/pubsub';
import { ConfigError, DeadLetters, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { DEAD_LETTER_ATTRIBUTES } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture, unique } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// `DeadLetters` (oncely dlq) on the Pub/Sub emulator and PostgreSQL: the dead letters are
// on the dead-letter topic and read through broker.deadLetterSubscription. 50 dead letters
// for two reasons, listed in failure groups, one group replayed to the source topic and
// processed once (effects counted from rows), a re-run a no-op, a copy left by a crash
// between publish and ack absorbed by the marker, the other group discarded with a record.
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

describe.skipIf(!hasPostgres)('Pub/Sub dead letters (emulator + PostgreSQL)', () => {
  const fixtures: AdapterFixture[] = [];
  afterEach(async () => {
    for (const fixture of fixtures.splice(0)) await fixture.drop();
  });

  /** A consumer fixture whose dead letters go to a new topic, with a subscription to read them. */
  async function setUp(label: string) {
    const fixture = await adapterFixture(pubsub, emulator, label);
    fixtures.push(fixture);
    const [deadTopic] = await pubsub.createTopic(unique(`${label}-dlt`));
    const [deadSubscription] = await deadTopic.createSubscription(unique(`${label}-dlt-sub`), {
      ackDeadlineSeconds: 10,
    });
    const broker = {
      ...fixture.broker,
      deadLetterTopic: deadTopic.name,
      deadLetterSubscription: deadSubscription.name,
    };
    const waiting = () => {
      const view = emulator.inspectSubscription(deadSubscription.name)!;
      return view.ready + view.outstanding;
    };
    const config = (overrides: Record<string, unknown> = {}) => ({
      name: label,
      broker: { ...broker, ...overrides } as never,
      store: fixture.store,
      handler: async () => {},
      logger: silentLogger,
    });
    return { fixture, deadTopic, deadSubscription, broker, waiting, config };
  }

  async function countEffects(fixture: AdapterFixture, id?: string): Promise<number> {
    const { rows } = await fixture.store.transaction((tx) =>
      tx.query(
        `SELECT count(*)::int AS n FROM "${fixture.schema}".effects${id ? ' WHERE id = $1' : ''}`,
        id ? [id] : [],
      ),
    );
    return (rows[0] as { n: number }).n;
  }

  it('lists two failure groups, replays one once, absorbs a second copy, discards the other', async () => {
    const { fixture, deadTopic, broker, waiting, config } = await setUp('dlq-api');
    // Sees what reaches the source topic: the originals, then the replayed copies.
    const [observer] = await fixture.topic.createSubscription(unique('dlq-api-observer'));
    const broken = { on: true };
    const { consumer, events } = fixture.consumer({
      broker,
      maxAttempts: 2,
      backoff: { initialMs: 10, maxMs: 20 },
      concurrency: 8,
      handler: async (message, ctx) => {
        if (broken.on) throw new Error(`payment service down (${message.id})`);
        await ctx.tx.query(`INSERT INTO "${fixture.schema}".effects (id) VALUES ($1)`, [message.id]);
      },
    });
    await consumer.start();
    fixture.topic.setPublishOptions({ messageOrdering: true });
    const failing = Array.from({ length: 25 }, (_, i) => `fail-${i}`);
    const garbled = Array.from({ length: 25 }, (_, i) => `bad-${i}`);
    await Promise.all([
      ...failing.map((id, i) =>
        fixture.topic.publishMessage({
          data: Buffer.from(JSON.stringify({ id })),
          attributes: { 'message-id': id, tenant: 't1' },
          orderingKey: `key-${i % 3}`,
        }),
      ),
      ...garbled.map((id, i) =>
        fixture.topic.publishMessage({
          data: Buffer.from(`{"id": "${id}", broken ${i}`),
          attributes: { 'message-id': id },
        }),
      ),
    ]);
    await waitFor(() => waiting() === 50, { timeoutMs: 60_000, description: '50 dead letters' });

    const dead = await DeadLetters.open(config());
    const { letters, groups } = await dead.list();
    expect(letters).toHaveLength(50);
    expect(groups.map((g) => [g.reason, g.count]).sort()).toEqual([
      ['invalid-body', 25],
      ['max-attempts', 25],
    ]);
    expect(letters.map((l) => l.messageId).sort()).toEqual([...failing, ...garbled].sort());
    expect(letters.every((l) => l.lastFailedAt instanceof Date)).toBe(true);
    // Dead-letter attributes are not the message's own.
    expect(letters.find((l) => l.messageId === 'fail-0')!.attributes).toEqual({
      'message-id': 'fail-0',
      tenant: 't1',
    });
    // Given back at once (ModifyAckDeadline 0): a second listing sees all of them.
    expect((await dead.list()).letters).toHaveLength(50);
    expect(waiting()).toBe(50);

    const dry = await dead.replay({ group: 'max-attempts' }, { dryRun: true });
    expect(dry.replayed.sort()).toEqual([...failing].sort());
    expect(waiting()).toBe(50);

    broken.on = false;
    const replayed = await dead.replay({ group: 'max-attempts' });
    expect(replayed.replayed.sort()).toEqual([...failing].sort());
    expect(waiting()).toBe(25);
    await waitFor(async () => (await countEffects(fixture)) === 25, {
      timeoutMs: 60_000,
      description: '25 effects',
    });
    for (const id of failing) expect(await countEffects(fixture, id)).toBe(1);

    // The copies on the source topic: original data, attributes and ordering key, no dead-letter attributes.
    const copies = emulator
      .inspectSubscription(observer.name)!
      .messages.filter((m) => m.attributes['message-id'] === 'fail-4');
    expect(copies).toHaveLength(2);
    const copy = copies[1]!;
    expect(copy.attributes).toEqual({ 'message-id': 'fail-4', tenant: 't1' });
    expect(copy.orderingKey).toBe('key-1');
    expect(JSON.parse(copy.data.toString())).toEqual({ id: 'fail-4' });

    // Re-run: nothing left in the group.
    expect(await dead.replay({ group: 'max-attempts' })).toMatchObject({
      replayed: [],
      alreadyProcessed: [],
      notFound: ['max-attempts'],
    });
    // A copy a crash left behind (published to the source, then the process died before
    // its ack): replayed again, the consumer's marker makes it a duplicate.
    await deadTopic.publishMessage({
      data: Buffer.from(JSON.stringify({ id: 'fail-7' })),
      attributes: {
        'message-id': 'fail-7',
        [DEAD_LETTER_ATTRIBUTES.reason]: 'max-attempts',
        [DEAD_LETTER_ATTRIBUTES.detail]: 'payment service down (fail-7)',
        [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: '1',
        [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: fixture.subscriptionName,
      },
    });
    expect(await dead.replay({ group: 'max-attempts' })).toMatchObject({
      replayed: [],
      alreadyProcessed: ['fail-7'],
    });
    await waitFor(() => events.count('duplicate', 'fail-7') === 1, {
      timeoutMs: 30_000,
      description: 'the second copy acked as a duplicate',
    });
    expect(await countEffects(fixture, 'fail-7')).toBe(1);

    const discarded = await dead.discard({ group: 'invalid-body' }, { by: 'tester' });
    expect(discarded.discarded).toHaveLength(25);
    expect(waiting()).toBe(0);
    expect(await fixture.store.deadLetterLog!.discards('dlq-api', 'bad-3')).toMatchObject([
      { reason: 'invalid-body', discardedBy: 'tester' },
    ]);
    expect(await countEffects(fixture)).toBe(25);
  }, 180_000);

  it('lists a copy without an ID, replays it as such; leaves another subscription’s copies alone', async () => {
    const { fixture, deadTopic, broker, waiting, config } = await setUp('dlq-noid');
    await deadTopic.publishMessage({ data: Buffer.from('{"anything": 1}'), attributes: { tenant: 't2' } });
    const otherSubscription = 'projects/oncely-test/subscriptions/someone-else';
    await deadTopic.publishMessage({
      data: Buffer.from('{}'),
      attributes: {
        'message-id': 'theirs-1',
        [DEAD_LETTER_ATTRIBUTES.reason]: 'max-attempts',
        [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: '9',
        [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: otherSubscription,
      },
    });
    await waitFor(() => waiting() === 2, { timeoutMs: 10_000, description: 'two copies' });
    const dead = await DeadLetters.open(config());
    const { letters } = await dead.list();
    expect(letters).toHaveLength(1);
    expect(letters[0]).toMatchObject({ reason: 'unknown', attributes: { tenant: 't2' } });
    expect(letters[0]!.messageId).toBeUndefined();
    expect(waiting()).toBe(2);

    const { consumer, events } = fixture.consumer({ broker, handler: async () => {} });
    await consumer.start();
    expect(await dead.replay({ group: 'unknown' })).toMatchObject({ withoutId: 1, replayed: [] });
    // Still without an ID: the consumer dead-letters it again, now with its reason.
    await waitFor(() => events.count('deadLettered') === 1, {
      timeoutMs: 30_000,
      description: 'dead-lettered again',
    });
    const after = await dead.list();
    expect(after.letters.map((l) => l.reason)).toEqual(['missing-id']);
    expect(waiting()).toBe(2);
  }, 60_000);

  it('refuses a missing, unknown or wrong dead-letter subscription', async () => {
    const { fixture, config } = await setUp('dlq-bad');
    const noSubscription = await DeadLetters.open(config({ deadLetterSubscription: undefined }));
    const missing = await noSubscription.list().catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(ConfigError);
    expect(missing).toMatchObject({ field: 'broker.deadLetterSubscription' });

    const unknown = await DeadLetters.open(config({ deadLetterSubscription: 'no-such-subscription' }));
    await expect(unknown.list()).rejects.toMatchObject({
      code: 'BROKER_MISCONFIGURED',
      message: expect.stringContaining('no-such-subscription does not exist'),
    });

    // A subscription on another topic would list (and act on) messages that are no dead letters.
    // (A third topic: one on the consumer's own topic is refused as such, deadLetterAttacks.test.ts.)
    const [otherTopic] = await pubsub.createTopic(unique('dlq-bad-other'));
    const [elsewhere] = await otherTopic.createSubscription(unique('dlq-bad-elsewhere'));
    const wrong = await DeadLetters.open(config({ deadLetterSubscription: elsewhere.name }));
    await expect(wrong.list()).rejects.toMatchObject({
      code: 'BROKER_MISCONFIGURED',
      message: expect.stringContaining("not the consumer's dead-letter topic"),
    });

    expect(() =>
      fixture.consumer({ broker: { deadLetterSubscription: 'x' }, handler: async () => {} }),
    ).toThrow(/broker.deadLetterSubscription must be a subscription ID/);
  }, 60_000);
});
