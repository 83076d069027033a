import type { PubSub, Topic } from '@google-cloud/pubsub';
import { status } from '@grpc/grpc-js';
import { DeadLetters, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { DEAD_LETTER_ATTRIBUTES, DEAD_LETTER_SESSION_LEASE_SECONDS, openDeadLetters } from '@oncely/pubsub';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture, unique } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// Attacks on the Pub/Sub dead-letter session (oncely dlq) as an operator of a payments
// consumer would hurt it: faults mid-pass, bad copies, bad configuration. Each checks that
// no dead letter is lost (in the source, or still in the dead-letter subscription).
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

describe.skipIf(!hasPostgres)('Pub/Sub dead letters under attack (emulator + PostgreSQL)', () => {
  const fixtures: AdapterFixture[] = [];
  afterEach(async () => {
    for (const fixture of fixtures.splice(0)) await fixture.drop();
  });

  async function setUp(label: string) {
    const fixture = await adapterFixture(pubsub, emulator, label);
    fixtures.push(fixture);
    const [deadTopic] = await pubsub.createTopic(unique(`${label}-dlt`));
    const [deadSubscription] = await deadTopic.createSubscription(unique(`${label}-dlt-sub`), {
      ackDeadlineSeconds: 10,
    });
    const config = (broker: Record<string, unknown> = {}) => ({
      name: label,
      broker: {
        ...fixture.broker,
        deadLetterTopic: deadTopic.name,
        deadLetterSubscription: deadSubscription.name,
        ...broker,
      } as never,
      store: fixture.store,
      handler: async () => {},
      logger: silentLogger,
    });
    const ids = (name: string, states = ['ready', 'outstanding']) =>
      emulator
        .inspectSubscription(name)!
        .messages.filter((m) => states.includes(m.state))
        .map((m) => m.attributes['message-id']!)
        .sort();
    return { fixture, deadTopic, deadSubscription, config, ids };
  }

  /** `count` Oncely copies of messages `${prefix}-i` from the fixture's subscription. */
  async function deadLetter(deadTopic: Topic, fixture: AdapterFixture, prefix: string, count: number) {
    const names: string[] = [];
    for (let start = 0; start < count; start += 200) {
      const batch = Array.from({ length: Math.min(200, count - start) }, (_, k) => `${prefix}-${start + k}`);
      await Promise.all(
        batch.map((id) =>
          deadTopic.publishMessage({
            data: Buffer.from(JSON.stringify({ id })),
            attributes: {
              'message-id': id,
              [DEAD_LETTER_ATTRIBUTES.reason]: 'max-attempts',
              [DEAD_LETTER_ATTRIBUTES.detail]: 'payment service down',
              [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: '1',
              [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: fixture.subscriptionName,
            },
          }),
        ),
      );
      names.push(...batch);
    }
    return names.sort();
  }

  it('refuses a dead-letter subscription on the source topic: it would list live messages and replay them again', async () => {
    const { fixture, config } = await setUp('atk-loop');
    // A subscription on the consumer's own topic, with no dead-letter topic to check it
    // against (no broker.deadLetterTopic, no policy): every live message would be listed
    // as a dead letter ('unknown') and a replay would publish it to the topic again.
    const [sibling] = await fixture.topic.createSubscription(unique('atk-loop-sibling'));
    await fixture.topic.publishMessage({ data: Buffer.from('{}'), attributes: { 'message-id': 'live-1' } });
    const opening = DeadLetters.open(
      config({ deadLetterTopic: undefined, deadLetterSubscription: sibling.name }),
    ).then((dead) => dead.list());
    await expect(opening).rejects.toMatchObject({
      code: 'BROKER_MISCONFIGURED',
      message: expect.stringContaining('reads the consumer’s own topic'),
    });
    // broker.deadLetterTopic set to the source topic itself: refused the same way.
    const same = DeadLetters.open(
      config({ deadLetterTopic: fixture.topic.name, deadLetterSubscription: sibling.name }),
    ).then((dead) => dead.list());
    await expect(same).rejects.toMatchObject({ code: 'BROKER_MISCONFIGURED' });
  }, 30_000);

  it('reads a copy with garbage in its folded attribute without inventing attributes', async () => {
    const { fixture, deadTopic, config } = await setUp('atk-garbage');
    const source = fixture.subscriptionName;
    const garbage = [
      { reason: 'max-attempts', sourceSubscription: source, moved: { kept: 'yes', bad: { b: 1 } } },
      { reason: 'max-attempts', sourceSubscription: source, moved: 'abc', orderingKey: 7 },
      { reason: 42, detail: ['x'], sourceSubscription: source },
    ];
    for (const [i, folded] of garbage.entries()) {
      await deadTopic.publishMessage({
        data: Buffer.from('{}'),
        attributes: { 'message-id': `garbage-${i}`, [DEAD_LETTER_ATTRIBUTES.folded]: JSON.stringify(folded) },
      });
    }
    await deadTopic.publishMessage({
      data: Buffer.from('{}'),
      attributes: { 'message-id': 'garbage-3', [DEAD_LETTER_ATTRIBUTES.folded]: '5' },
    });
    const dead = await DeadLetters.open(config());
    const { letters } = await dead.list();
    const byId = Object.fromEntries(letters.map((l) => [l.messageId, l]));
    expect(Object.keys(byId).sort()).toEqual(['garbage-0', 'garbage-1', 'garbage-2', 'garbage-3']);
    // Only string attributes of the original come back; nothing made of a string's letters.
    expect(byId['garbage-0']!.attributes).toEqual({ 'message-id': 'garbage-0', kept: 'yes' });
    expect(byId['garbage-1']!.attributes).toEqual({ 'message-id': 'garbage-1' });
    for (const letter of letters) expect(typeof letter.reason).toBe('string');
    expect(byId['garbage-2']!.reason).toBe('unknown');
    expect(byId['garbage-3']!.reason).toBe('unknown');
    expect(await dead.replay({})).toMatchObject({ replayed: expect.arrayContaining(['garbage-0']) });
    const back = emulator.inspectSubscription(source)!.messages;
    expect(back.map((m) => [m.attributes['message-id'], m.attributes, m.orderingKey ?? '']).sort()).toEqual([
      ['garbage-0', { 'message-id': 'garbage-0', kept: 'yes' }, ''],
      ['garbage-1', { 'message-id': 'garbage-1' }, ''],
      ['garbage-2', { 'message-id': 'garbage-2' }, ''],
      ['garbage-3', { 'message-id': 'garbage-3' }, ''],
    ]);
  }, 30_000);

  it('keeps every dead letter when the source topic is deleted mid-replay, and says which and why', async () => {
    const { fixture, deadTopic, deadSubscription, config, ids } = await setUp('atk-refused');
    const all = await deadLetter(deadTopic, fixture, 'pay', 120);
    const dead = await DeadLetters.open(config());
    let seen = 0;
    let deleting: Promise<unknown> | undefined;
    const error = await dead
      .replay(
        {},
        {
          onReplayed: () => {
            seen += 1;
            if (seen === 10) deleting = fixture.topic.delete();
          },
        },
      )
      .then(
        () => undefined,
        (e: Error) => e,
      );
    await deleting;
    expect(error?.message).toMatch(
      /^replay of dead letter pay-\d+ failed: the publish to projects\/.*\/topics\/atk-refused-.* was refused \(5 NOT_FOUND.*\); it stays in projects\/.*\/subscriptions\/atk-refused-dlt-sub-/,
    );
    const inSource = ids(fixture.subscriptionName);
    const left = ids(deadSubscription.name);
    expect(all.filter((id) => !inSource.includes(id) && !left.includes(id))).toEqual([]);
    expect(left.length).toBeGreaterThan(0);
  }, 30_000);

  it('loses nothing when Acknowledge fails after the publish (the copy stays: a duplicate at most)', async () => {
    const { fixture, deadTopic, deadSubscription, config, ids } = await setUp('atk-ack');
    const all = await deadLetter(deadTopic, fixture, 'pay', 120);
    const dead = await DeadLetters.open(config());
    emulator.failSettlements({
      rpc: 'Acknowledge',
      count: 3,
      code: status.FAILED_PRECONDITION,
      subscription: deadSubscription.name,
    });
    // Says the letter went out and stays in the DLQ too: a re-run is safe, nothing to chase.
    await expect(dead.replay({})).rejects.toThrow(
      /^replay of dead letter pay-\d+: published to projects\/.*\/topics\/atk-ack-\S+, but removing it from projects\/.*\/subscriptions\/atk-ack-dlt-sub-\S+ failed \(9 FAILED_PRECONDITION: .*\): it is in both; a later replay sends it again/,
    );
    const inSource = ids(fixture.subscriptionName);
    const left = ids(deadSubscription.name);
    expect(all.filter((id) => !inSource.includes(id) && !left.includes(id))).toEqual([]);
    // A second replay finishes the job; the markers would absorb the duplicates.
    await dead.replay({});
    expect(ids(deadSubscription.name)).toEqual([]);
    expect(new Set(ids(fixture.subscriptionName))).toEqual(new Set(all));
  }, 30_000);

  it('says what a failed Pull left behind (nothing moved), and a later pass reads every letter', async () => {
    const { fixture, deadTopic, config } = await setUp('atk-pull');
    const all = await deadLetter(deadTopic, fixture, 'pay', 50);
    const session = await openDeadLetters(config());
    // The service gone between the session's set-up and its first Pull.
    const restarting = emulator.restart({ downMs: 3000 });
    const error = await session.read().then(
      () => undefined,
      (e: Error) => e,
    );
    await restarting;
    await session.close();
    expect(error?.message).toMatch(
      /^reading dead letters from projects\/.*\/subscriptions\/atk-pull-dlt-sub-\S+ failed after 0 copies \(\d+ [A-Z_]+: .*\): nothing was moved/,
    );
    const { letters } = await (await DeadLetters.open(config())).list();
    expect(letters.map((l) => l.messageId).sort()).toEqual(all);
  }, 60_000);

  it('lists and replays three dead letters near the 10 MB limit (more than one response holds)', async () => {
    const { fixture, deadTopic, deadSubscription, config, ids } = await setUp('atk-big');
    const all = ['big-0', 'big-1', 'big-2'];
    for (const id of all) {
      await deadTopic.publishMessage({
        data: Buffer.alloc(9_900_000, id),
        attributes: {
          'message-id': id,
          [DEAD_LETTER_ATTRIBUTES.reason]: 'max-attempts',
          [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: fixture.subscriptionName,
        },
      });
    }
    const dead = await DeadLetters.open(config());
    const { letters } = await dead.list();
    expect(letters.map((l) => l.messageId).sort()).toEqual(all);
    expect(await dead.replay({})).toMatchObject({ replayed: expect.arrayContaining(all) });
    expect(ids(fixture.subscriptionName)).toEqual(all);
    expect(ids(deadSubscription.name)).toEqual([]);
    const back = emulator.inspectSubscription(fixture.subscriptionName)!.messages;
    expect(back.map((m) => m.data.length)).toEqual([9_900_000, 9_900_000, 9_900_000]);
  }, 60_000);

  it('refuses what the README refuses: the source subscription itself, ordering, a policy of its own', async () => {
    const { fixture, deadTopic, config } = await setUp('atk-refusals');
    const listWith = (broker: Record<string, unknown>) =>
      DeadLetters.open(config(broker)).then((dead) => dead.list());
    // The source subscription by its ID while the consumer names it in full: still itself.
    await expect(
      listWith({ deadLetterSubscription: fixture.subscriptionName.split('/').pop() }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', field: 'broker.deadLetterSubscription' });
    const [ordered] = await deadTopic.createSubscription(unique('atk-ordered'), {
      enableMessageOrdering: true,
    });
    await expect(listWith({ deadLetterSubscription: ordered.name })).rejects.toMatchObject({
      code: 'BROKER_MISCONFIGURED',
      message: expect.stringContaining('message ordering'),
    });
    const [further] = await pubsub.createTopic(unique('atk-further'));
    const [forwarding] = await deadTopic.createSubscription(unique('atk-forwarding'), {
      deadLetterPolicy: { deadLetterTopic: further.name, maxDeliveryAttempts: 5 },
    });
    await expect(listWith({ deadLetterSubscription: forwarding.name })).rejects.toMatchObject({
      code: 'BROKER_MISCONFIGURED',
      message: expect.stringContaining('dead-letter policy of its own'),
    });
    // Another project's subscription: named, not found.
    await expect(
      listWith({ deadLetterSubscription: 'projects/other-project/subscriptions/payments-dead' }),
    ).rejects.toMatchObject({
      code: 'BROKER_MISCONFIGURED',
      message: expect.stringContaining('projects/other-project/subscriptions/payments-dead does not exist'),
    });
  }, 30_000);

  it('rides out the connection cut mid-replay (the client retries Publish and Acknowledge): nothing lost', async () => {
    const { fixture, deadTopic, deadSubscription, config, ids } = await setUp('atk-cut');
    const all = await deadLetter(deadTopic, fixture, 'pay', 200);
    const dead = await DeadLetters.open(config());
    let seen = 0;
    let restarting: Promise<void> | undefined;
    const outcome = await dead
      .replay(
        {},
        {
          onReplayed: () => {
            seen += 1;
            if (seen === 60) restarting = emulator.restart({ downMs: 2000 });
          },
        },
      )
      .then(
        (report) => report.replayed.length,
        (e: Error) => e.message,
      );
    await restarting;
    const inSource = ids(fixture.subscriptionName);
    const left = ids(deadSubscription.name);
    expect(all.filter((id) => !inSource.includes(id) && !left.includes(id))).toEqual([]);
    expect(outcome).toBe(200);
    expect(left).toEqual([]);
  }, 60_000);

  it('says which letter a discard could not remove and that it stays, recorded', async () => {
    const { fixture, deadTopic, deadSubscription, config, ids } = await setUp('atk-discard');
    const all = await deadLetter(deadTopic, fixture, 'pay', 20);
    const dead = await DeadLetters.open(config());
    emulator.failSettlements({
      rpc: 'Acknowledge',
      count: 1,
      code: status.FAILED_PRECONDITION,
      subscription: deadSubscription.name,
    });
    await expect(dead.discard({ all: true }, { by: 'alice' })).rejects.toThrow(
      /^discard of dead letter pay-\d+: removing it from projects\/.*\/subscriptions\/atk-discard-dlt-sub-\S+ failed \(9 FAILED_PRECONDITION: .*\): it stays, its discard recorded; run the discard again/,
    );
    expect(ids(deadSubscription.name)).toEqual(all);
    await dead.discard({ all: true }, { by: 'alice' });
    expect(ids(deadSubscription.name)).toEqual([]);
  }, 30_000);

  it('stops a replay whose lease it can no longer renew, before a letter would be in both places', async () => {
    const { fixture, deadTopic, deadSubscription, config, ids } = await setUp('atk-lapse');
    const all = await deadLetter(deadTopic, fixture, 'pay', 300);
    // A slow pass (a busy store: 12 s per window of 50) that outlives the 60 s lease.
    const store = fixture.store;
    const slowStore = Object.assign(Object.create(store), {
      clearAttempts: async (at: { consumer: string; messageId: string }) => {
        await new Promise((resolve) => setTimeout(resolve, 12_000));
        return store.clearAttempts(at);
      },
    });
    // Renewals refused from the first replay on: the lease taken at the read lapses.
    let outage: { clear(): void } | undefined;
    const refuseRenewals = () => {
      outage ??= emulator.failSettlements({
        rpc: 'ModifyAckDeadline',
        ackDeadlineSeconds: DEAD_LETTER_SESSION_LEASE_SECONDS,
        count: 1_000_000,
        code: status.FAILED_PRECONDITION,
        subscription: deadSubscription.name,
      });
    };
    const dead = await DeadLetters.open({ ...config(), store: slowStore });
    const error = await dead.replay({}, { onReplayed: refuseRenewals }).then(
      (report) => report,
      (e: Error) => e,
    );
    outage?.clear();
    // Before: the pass reported all 300 replayed while the acks of the lapsed ones were
    // ignored: they stayed dead letters too, to be sent again by the next replay.
    const inSource = ids(fixture.subscriptionName);
    const left = ids(deadSubscription.name);
    expect({
      inBoth: inSource.filter((id) => left.includes(id)).length,
      failed: error instanceof Error,
    }).toEqual({
      inBoth: 0,
      failed: true,
    });
    expect((error as Error).message).toMatch(
      /lease .* could not be renewed .*FAILED_PRECONDITION.*stopped before/,
    );
    expect([...inSource, ...left].sort()).toEqual(all);
    await DeadLetters.open(config()).then((again) => again.replay({}));
    expect(ids(deadSubscription.name)).toEqual([]);
    expect(ids(fixture.subscriptionName)).toEqual(all);
  }, 180_000);
});
