import type { PubSub } from '@google-cloud/pubsub';
import { isOncelyError } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { DEAD_LETTER_ATTRIBUTES, diagnose } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture, unique } from './fixture.js';
import { adminClient, PROJECT, postgresAvailable, startEmulator } from './support.js';

// A consumer whose config names no project (IDs only, no broker.projectId, no
// PUBSUB_PROJECT_ID): the project comes from the environment (GOOGLE_CLOUD_PROJECT here,
// the credentials in production). Every name the adapter builds itself (the settlement
// client's, the dead-letter copy's source, diagnose's) must carry the resolved project,
// not the client's `{{projectId}}` placeholder. Its own file: the environment it sets is
// seen by no other test.
const hasPostgres = await postgresAvailable();
const ENVIRONMENT = ['GOOGLE_CLOUD_PROJECT', 'GCLOUD_PROJECT', 'PUBSUB_PROJECT_ID'] as const;
const saved = Object.fromEntries(ENVIRONMENT.map((name) => [name, process.env[name]]));
let emulator: PubSubEmulator;
let pubsub: PubSub;

function restoreEnvironment() {
  for (const name of ENVIRONMENT) {
    if (saved[name] === undefined) delete process.env[name];
    else process.env[name] = saved[name];
  }
}

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
  for (const name of ENVIRONMENT) delete process.env[name];
  process.env.GOOGLE_CLOUD_PROJECT = PROJECT;
});
afterAll(async () => {
  restoreEnvironment();
  await pubsub?.close();
  await emulator?.stop();
});

const id = (name: string) => name.split('/').pop()!;

describe.skipIf(!hasPostgres)('Pub/Sub project from the environment (emulator + PostgreSQL)', () => {
  const fixtures: AdapterFixture[] = [];
  afterEach(async () => {
    for (const fixture of fixtures.splice(0)) await fixture.drop();
    process.env.GOOGLE_CLOUD_PROJECT = PROJECT;
  });

  /** A fixture whose consumers name no project: the subscription and dead-letter topic by ID. */
  async function setUp(label: string) {
    const fixture = await adapterFixture(pubsub, emulator, label);
    fixtures.push(fixture);
    const [deadTopic] = await pubsub.createTopic(unique(`${label}-dlt`));
    const [deadReader] = await deadTopic.createSubscription(unique(`${label}-dlt-sub`));
    const broker = {
      projectId: undefined,
      subscription: id(fixture.subscriptionName),
      deadLetterTopic: id(deadTopic.name),
    };
    const view = (name: string) => emulator.inspectSubscription(name)!;
    return { fixture, broker, deadReader, view };
  }

  async function countEffects(fixture: AdapterFixture): Promise<{ rows: number; distinct: number }> {
    const { rows } = await fixture.store.transaction((tx) =>
      tx.query(
        `SELECT count(*)::int AS rows, count(DISTINCT id)::int AS distinct FROM "${fixture.schema}".effects`,
      ),
    );
    return rows[0] as { rows: number; distinct: number };
  }

  it('processes each message once and acks it (nothing left outstanding, no redelivery)', async () => {
    const { fixture, broker, view } = await setUp('env-project');
    const { consumer, events } = fixture.consumer({
      broker,
      concurrency: 4,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${fixture.schema}".effects (id) VALUES ($1)`, [message.id]);
      },
    });
    await consumer.start();
    const count = 20;
    await Promise.all(
      Array.from({ length: count }, (_, i) =>
        fixture.topic.publishMessage({ data: Buffer.from('{}'), attributes: { 'message-id': `m-${i}` } }),
      ),
    );
    // Ends early on a refused ack: the figures below then say what went wrong.
    await waitFor(() => events.count('processed') === count || events.count('ackFailed') > 0, {
      timeoutMs: 60_000,
      description: `${count} messages processed`,
    });
    // Settled one way or the other: every ack answered by the service, or one refused.
    await waitFor(
      () => view(fixture.subscriptionName).messages.length === 0 || events.count('ackFailed') > 0,
      { timeoutMs: 60_000, description: 'the acks answered' },
    );
    // The ack deadline lapsing now redelivers whatever the service still holds.
    const expired = emulator.expireLeases(fixture.subscriptionName);
    expect({
      processed: events.count('processed'),
      ackFailed: events.count('ackFailed'),
      effects: await countEffects(fixture),
      leftAtTheService: view(fixture.subscriptionName).messages.length,
      redeliveredAfterTheDeadline: expired,
    }).toEqual({
      processed: count,
      ackFailed: 0,
      effects: { rows: count, distinct: count },
      leftAtTheService: 0,
      redeliveredAfterTheDeadline: 0,
    });
  }, 90_000);

  it('dead-letters a poison message to the topic, naming the resolved subscription, and acks it', async () => {
    const { fixture, broker, deadReader, view } = await setUp('env-poison');
    const { consumer, events } = fixture.consumer({ broker, handler: async () => {} });
    await consumer.start();
    await fixture.topic.publishMessage({
      data: Buffer.from('{"broken'),
      attributes: { 'message-id': 'poison-1' },
    });
    await waitFor(() => view(deadReader.name).ready === 1, {
      timeoutMs: 60_000,
      description: 'the dead-letter copy',
    });
    await waitFor(
      () => view(fixture.subscriptionName).messages.length === 0 || events.count('ackFailed', 'poison-1') > 0,
      { timeoutMs: 60_000, description: 'the original settled' },
    );
    const copy = view(deadReader.name).messages[0]!;
    expect({
      deadLettered: events.count('deadLettered', 'poison-1'),
      ackFailed: events.count('ackFailed', 'poison-1'),
      reason: copy.attributes[DEAD_LETTER_ATTRIBUTES.reason],
      source: copy.attributes[DEAD_LETTER_ATTRIBUTES.sourceSubscription],
      leftAtTheService: view(fixture.subscriptionName).messages.length,
    }).toEqual({
      deadLettered: 1,
      ackFailed: 0,
      reason: 'invalid-body',
      source: fixture.subscriptionName,
      leftAtTheService: 0,
    });
  }, 90_000);

  it('diagnose() names the subscription with the resolved project', async () => {
    const { fixture, broker } = await setUp('env-diagnose');
    const report = await diagnose({
      name: 'env-diagnose',
      broker: { type: 'pubsub', apiEndpoint: emulator.address, ...broker } as never,
      store: undefined as never,
      handler: async () => {},
    });
    const subscription = report.findings.find((f) => f.message.startsWith('subscription '));
    expect(subscription).toEqual({
      level: 'ok',
      message: expect.stringContaining(`subscription ${fixture.subscriptionName} exists`),
    });
  }, 30_000);

  it('diagnose() reports a missing project as an error, before any name', async () => {
    const { broker } = await setUp('env-diagnose-none');
    delete process.env.GOOGLE_CLOUD_PROJECT;
    const report = await diagnose({
      name: 'env-diagnose-none',
      broker: { type: 'pubsub', apiEndpoint: emulator.address, ...broker } as never,
      store: undefined as never,
      handler: async () => {},
    });
    expect(report.findings).toEqual([
      {
        level: 'error',
        message: expect.stringMatching(/^no Google Cloud project found for Pub\/Sub .*start\(\) fails$/),
      },
    ]);
  }, 30_000);

  it('refuses to start when no project can be found (BROKER_MISCONFIGURED)', async () => {
    const { fixture, broker } = await setUp('env-none');
    delete process.env.GOOGLE_CLOUD_PROJECT;
    const { consumer } = fixture.consumer({ broker, handler: async () => {} });
    const failure = await consumer.start().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isOncelyError(failure, 'BROKER_MISCONFIGURED')).toBe(true);
    expect((failure as Error).message).toMatch(/project/);
  }, 60_000);
});
