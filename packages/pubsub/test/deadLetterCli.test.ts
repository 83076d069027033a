import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { DEAD_LETTER_ATTRIBUTES } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture, unique } from './fixture.js';
import { adminClient, DATABASE_URL, PROJECT, postgresAvailable, startEmulator } from './support.js';

// `oncely dlq` itself (the CLI's bin, configured from the environment as an operator
// would) on Pub/Sub dead letters: ONCELY_BROKER_DEAD_LETTER_SUBSCRIPTION reaches the
// adapter, a missing one is a clear refusal.
const hasPostgres = await postgresAvailable();
const BIN = fileURLToPath(new URL('../../cli/bin/oncely.js', import.meta.url));
let emulator: PubSubEmulator;
let pubsub: PubSub;
let fixture: AdapterFixture | undefined;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await fixture?.drop();
  await pubsub?.close();
  await emulator?.stop();
});

function oncely(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [BIN, 'dlq', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  return new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
    child.once('exit', (code) => resolve({ code, out, err })),
  );
}

describe.skipIf(!hasPostgres)('oncely dlq on Pub/Sub (CLI bin, emulator + PostgreSQL)', () => {
  it('lists, replays and discards through the environment; refuses without the subscription', async () => {
    fixture = await adapterFixture(pubsub, emulator, 'dlq-cli');
    const [deadTopic] = await pubsub.createTopic(unique('dlq-cli-dlt'));
    const [deadSubscription] = await deadTopic.createSubscription(unique('dlq-cli-dlt-sub'));
    for (let i = 0; i < 4; i++) {
      const poison = i % 2 === 0;
      await deadTopic.publishMessage({
        data: Buffer.from(poison ? `{broken ${i}` : `{"n":${i}}`),
        attributes: {
          'message-id': `m-${i}`,
          [DEAD_LETTER_ATTRIBUTES.reason]: poison ? 'invalid-body' : 'max-attempts',
          [DEAD_LETTER_ATTRIBUTES.detail]: poison ? `Unexpected token b at position ${i}` : 'timeout',
          [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: String(i),
          [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: fixture.subscriptionName,
        },
      });
    }
    const dead = () => emulator.inspectSubscription(deadSubscription.name)!;
    await waitFor(() => dead().ready === 4, { description: 'four dead letters' });
    const env = {
      DATABASE_URL,
      ONCELY_BROKER_TYPE: 'pubsub',
      ONCELY_BROKER_PROJECT_ID: PROJECT,
      ONCELY_BROKER_API_ENDPOINT: emulator.address,
      ONCELY_BROKER_SUBSCRIPTION: fixture.subscriptionName,
      ONCELY_BROKER_DEAD_LETTER_TOPIC: deadTopic.name,
      ONCELY_OPERATOR: 'alice',
    };
    const schema = ['--schema', fixture.schema];

    const refused = await oncely(['list', 'dlq-cli', ...schema], env);
    // Exit 2: a configuration the operator must complete, as for the other refusals.
    expect(refused.code, refused.out).toBe(2);
    expect(refused.err).toContain('broker.deadLetterSubscription');

    const withSubscription = { ...env, ONCELY_BROKER_DEAD_LETTER_SUBSCRIPTION: deadSubscription.name };
    const listed = await oncely(['list', 'dlq-cli', '--json', ...schema], withSubscription);
    expect(listed, listed.err).toMatchObject({ code: 0 });
    const { groups } = JSON.parse(listed.out) as { groups: Array<{ reason: string; count: number }> };
    expect(groups.map((g) => [g.reason, g.count]).sort()).toEqual([
      ['invalid-body', 2],
      ['max-attempts', 2],
    ]);
    const replayed = await oncely(
      ['replay', 'dlq-cli', '--group', 'max-attempts', ...schema],
      withSubscription,
    );
    expect(replayed, replayed.err).toMatchObject({ code: 0 });
    expect(replayed.out).toContain('replayed 2 not yet processed: m-1, m-3');
    expect(
      emulator
        .inspectSubscription(fixture.subscriptionName)!
        .messages.map((m) => m.attributes['message-id'])
        .sort(),
    ).toEqual(['m-1', 'm-3']);
    const discarded = await oncely(
      ['discard', 'dlq-cli', '--group', 'invalid-body', '--yes', ...schema],
      withSubscription,
    );
    expect(discarded, discarded.err).toMatchObject({ code: 0 });
    expect(discarded.out).toContain('discarded 2 (recorded as by alice)');
    expect(dead().messages).toHaveLength(0);
  }, 90_000);
});
