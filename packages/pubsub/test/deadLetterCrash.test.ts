import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { PubSub } from '@google-cloud/pubsub';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { DEAD_LETTER_ATTRIBUTES } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AdapterFixture, adapterFixture, unique } from './fixture.js';
import { adminClient, DATABASE_URL, postgresAvailable, startEmulator } from './support.js';

// A replay of 300 dead letters whose process is SIGKILLed three times half-way, then run
// to the end: every message ends processed exactly once (effects counted from rows), none
// lost, none doubled. The dead process's leases are let lapse at once (the emulator's
// expireLeases: the 60 s deadline passing), as the service does after it. A kill after a
// publish and before its ack leaves the letter in both places: the marker absorbs it.
const hasPostgres = await postgresAvailable();
const CHILD = fileURLToPath(new URL('./dlqReplayChild.mjs', import.meta.url));
const TOTAL = 300;
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

/**
 * A replay in a child process, SIGKILLed as soon as `killWhen()` holds (checked every
 * 2 ms): a moment of the broker's state, not a completion the child reported, so that a
 * kill can land between two steps of one letter.
 */
function startReplay(payload: unknown, killWhen: () => boolean = () => false) {
  const child: ChildProcess = spawn(process.execPath, [CHILD], {
    env: { ...process.env, DLQ_CHILD: JSON.stringify(payload) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const replayed = () => (output.match(/^replayed /gm) ?? []).length;
  const watch = setInterval(() => {
    if (killWhen()) child.kill('SIGKILL');
  }, 2);
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
  });
  child.once('exit', () => clearInterval(watch));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, exited, replayed, output: () => output };
}

describe.skipIf(!hasPostgres)('Pub/Sub dead-letter replay killed half-way (emulator + PostgreSQL)', () => {
  it(`${TOTAL} dead letters, the replaying process SIGKILLed 3 times: lost 0, doubled 0`, async () => {
    fixture = await adapterFixture(pubsub, emulator, 'dlq-crash');
    const [deadTopic] = await pubsub.createTopic(unique('dlq-crash-dlt'));
    const [deadSubscription] = await deadTopic.createSubscription(unique('dlq-crash-dlt-sub'));
    const ids = Array.from({ length: TOTAL }, (_, i) => `crash-${i}`);
    await Promise.all(
      ids.map((id) =>
        deadTopic.publishMessage({
          data: Buffer.from(JSON.stringify({ id })),
          attributes: {
            'message-id': id,
            [DEAD_LETTER_ATTRIBUTES.reason]: 'max-attempts',
            [DEAD_LETTER_ATTRIBUTES.detail]: 'failed 5 times; last error: down',
            [DEAD_LETTER_ATTRIBUTES.sourceMessageId]: '1',
            [DEAD_LETTER_ATTRIBUTES.sourceSubscription]: fixture!.subscriptionName,
          },
        }),
      ),
    );
    const broker = {
      ...fixture.broker,
      deadLetterTopic: deadTopic.name,
      deadLetterSubscription: deadSubscription.name,
    };
    const schema = fixture.schema;
    const { consumer } = fixture.consumer({
      broker,
      concurrency: 8,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${schema}".effects (id) VALUES ($1)`, [message.id]);
      },
    });
    await consumer.start();
    const payload = {
      connectionString: DATABASE_URL,
      schema,
      config: { name: 'dlq-crash', broker },
    };
    const dead = () => emulator.inspectSubscription(deadSubscription.name)!;
    const kills: number[] = [];
    // Each kill as soon as the dead-letter subscription lost `removed` more letters (acks
    // landing), mid-window: 50 replays run at once.
    for (const removed of [20, 60, 35]) {
      const before = dead().messages.length;
      const run = startReplay(payload, () => dead().messages.length <= before - removed);
      const { signal } = await run.exited;
      expect(signal, run.output()).toBe('SIGKILL');
      kills.push(run.replayed());
      // The dead process's leases run out (the service: within 60 s): the rest is back.
      emulator.expireLeases(deadSubscription.name);
      expect(dead().outstanding).toBe(0);
      expect(dead().ready).toBeGreaterThan(0);
    }
    expect(
      kills.every((n) => n < TOTAL),
      String(kills),
    ).toBe(true);
    const last = startReplay(payload);
    const { code } = await last.exited;
    expect(code, last.output()).toBe(0);
    expect(last.output()).toMatch(/^done \d+$/m);

    const count = async () => {
      const { rows } = await fixture!.store.transaction((tx) =>
        tx.query(`SELECT id, count(*)::int AS n FROM "${schema}".effects GROUP BY id`),
      );
      return new Map((rows as Array<{ id: string; n: number }>).map((r) => [r.id, r.n]));
    };
    // An effect commits before its message is acked: a drained source has them all.
    await waitFor(
      () => {
        const source = emulator.inspectSubscription(fixture!.subscriptionName)!;
        return source.ready + source.outstanding === 0;
      },
      { timeoutMs: 120_000, description: 'the source drained' },
    );
    const effects = await count();
    const lost = ids.filter((id) => !effects.has(id));
    const doubled = [...effects].filter(([, n]) => n > 1).map(([id]) => id);
    expect({ lost, doubled, distinct: effects.size }).toEqual({ lost: [], doubled: [], distinct: TOTAL });
    expect(dead().messages).toHaveLength(0);
    console.log(`killed after ${kills.join(', ')} replayed`);
  }, 300_000);
});
