/**
 * A replay of 1,000 Kafka dead letters whose process is SIGKILLed five times half-way, then
 * run to the end: every message ends processed exactly once (effects counted from rows),
 * none lost, none doubled, and (the stronger Kafka claim, which no marker helps with) the
 * source topic holds exactly one re-sent copy of each. Where each kill lands is tied to what
 * the test observes, never to a clock:
 * - after a number of replayed lines (anywhere in a later window);
 * - `intent`: the child stops once a batch's intents (`replaying`) are committed, before its
 *   send, prints so, and is killed there;
 * - `sent`: the child stops once a batch was sent and acknowledged, before the `replayed`
 *   record, prints so, and is killed there (the test checks the copies are in the source).
 *   Only the next pass's recovery keeps these from being sent twice (planted: a recovery
 *   that finds nothing fails this test with copies sent twice, and in offsets mode with
 *   effects doubled).
 * The child stops by a hook on its store's ledger writes (dlqReplayChild.mjs): a kill that
 * polled for those states from outside came too late on a loaded machine.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type ConsumerConfig, createConsumer, silentLogger } from '@oncely/core';
import { DEAD_LETTER_HEADERS, deadLetterRecord } from '@oncely/kafka';
import type { Admin, Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, DATABASE_URL, kafkaClient, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();
const CHILD = fileURLToPath(new URL('./dlqReplayChild.mjs', import.meta.url));
const PARTITIONS = 4;

interface ReplayChild {
  process: ChildProcess;
  /** Lines `replayed ...` printed so far. */
  count(): number;
  /** It printed `paused ...`. */
  paused(): boolean;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>;
}

function startReplay(payload: unknown, pause?: string): ReplayChild {
  const child = spawn(process.execPath, [CHILD], {
    env: { ...process.env, DLQ_CHILD: JSON.stringify(payload), ...(pause ? { DLQ_PAUSE: pause } : {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let count = 0;
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
    count = (output.match(/^replayed /gm) ?? []).length;
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>(
    (resolve) => child.once('exit', (code, signal) => resolve({ code, signal, output })),
  );
  return { process: child, exited, count: () => count, paused: () => /^paused /m.test(output) };
}

describe.skipIf(!brokers)('Kafka dead-letter replay killed half-way (real Kafka + PostgreSQL)', () => {
  let kafka: Kafka;
  let admin: Admin;
  let db: TestStore;
  /** A failing test keeps the schema as evidence. */
  let failed = false;

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-dlq-crash');
    admin = kafka.admin();
    await admin.connect();
    db = await createTestStore('oncely_kafka_dlq_crash');
  });
  afterAll(async () => {
    await admin?.disconnect();
    await db?.close(!failed);
  });

  /** Copies of each message ID in `topic` that carry `oncely-replay-of`, read from the start to its end now. */
  async function replayedCopies(topic: string): Promise<Map<string, number>> {
    const ends = new Map(
      (await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, BigInt(p.high)] as const),
    );
    const copies = new Map<string, number>();
    const consumer = kafka.consumer({ groupId: uniqueName('dlq-crash-reader'), maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    const read = new Map<number, bigint>();
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        if (message.headers?.[DEAD_LETTER_HEADERS.replayOf] !== undefined) {
          const id = message.headers['message-id']!.toString();
          copies.set(id, (copies.get(id) ?? 0) + 1);
        }
        read.set(partition, BigInt(message.offset) + 1n);
      },
    });
    try {
      await until(
        `${topic} read to its end`,
        () => [...ends].every(([p, end]) => end === 0n || (read.get(p) ?? 0n) >= end),
        60_000,
      );
    } finally {
      await consumer.disconnect();
    }
    return copies;
  }

  /** Kill after `lines` replayed lines, or where the child paused in its `batch`-th batch. */
  type KillAt = { at: 'lines'; lines: number } | { at: 'intent' | 'sent'; batch: number };

  /**
   * Seeds `total` dead letters, runs the replay child killed at each step of `plan`, then to
   * the end, with the consumer running in `mode`; checks effects, copies and the ledger.
   * In `offsets` mode the letters carry no `message-id`: the consumer names them by their
   * original `topic/partition/offset`, and no marker absorbs a second copy.
   */
  async function replayKilled(total: number, mode: 'transactional' | 'offsets', plan: KillAt[]) {
    try {
      await replayKilledRun(total, mode, plan);
    } catch (error) {
      failed = true;
      throw error;
    }
  }

  async function replayKilledRun(total: number, mode: 'transactional' | 'offsets', plan: KillAt[]) {
    const topic = uniqueName('dlqcrash');
    const dlqTopic = `${topic}.dlq`;
    await createTopic(admin, topic, PARTITIONS);
    await createTopic(admin, dlqTopic, PARTITIONS);
    const name = `c-${topic}`;
    const ids = Array.from({ length: total }, (_, i) =>
      mode === 'offsets' ? `${topic}/${i % PARTITIONS}/${Math.floor(i / PARTITIONS)}` : `${topic}-${i}`,
    );
    const seed = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await seed.connect();
    try {
      for (let start = 0; start < total; start += 200) {
        await seed.send({
          topic: dlqTopic,
          acks: -1,
          messages: ids.slice(start, start + 200).map((id, j) => {
            const i = start + j;
            return {
              ...deadLetterRecord({
                topic,
                partition: i % PARTITIONS,
                message: {
                  key: Buffer.from(id),
                  value: Buffer.from(JSON.stringify({ id })),
                  headers: mode === 'offsets' ? {} : { 'message-id': id },
                  offset: String(Math.floor(i / PARTITIONS)),
                  timestamp: String(Date.now()),
                  attributes: 0,
                },
                consumer: name,
                reason: 'max-attempts',
                detail: 'failed 5 times; last error: down',
                attempts: 5,
              }),
              partition: i % PARTITIONS,
            };
          }),
        });
      }
    } finally {
      await seed.disconnect();
    }

    const broker = {
      type: 'kafka' as const,
      brokers: brokers!,
      topic,
      fromBeginning: true,
      maxWaitTimeInMs: 200,
      sessionTimeout: 10_000,
      ...clientUnderTest(),
    };
    const config: ConsumerConfig<{ id: string }> = {
      name,
      broker,
      store: db.store,
      logger: silentLogger,
      mode,
      concurrency: 8,
      handler: async (message, ctx) => {
        await db.insertEffect(ctx.tx, { id: message.id, consumer: name });
      },
    };
    const consumer = await createConsumer(config);
    await consumer.start();
    const payload = {
      connectionString: DATABASE_URL,
      schema: db.schema,
      config: { name, broker, mode },
    };
    /** Rows per state; `since`: only rows written at or after it. */
    const ledgerStates = async (since = new Date(0)) => {
      const { rows } = await db.store.transaction((tx) =>
        tx.query<{ state: string; n: string }>(
          `SELECT state, count(*) AS n FROM "${db.schema}".dead_letter_ledger
            WHERE consumer = $1 AND at >= $2 GROUP BY state ORDER BY state`,
          [name, since],
        ),
      );
      return Object.fromEntries(rows.map((r) => [r.state, Number(r.n)]));
    };
    /** Whether every copy of this child's unrecorded intents is in the source (its partitions grew past `from`). */
    const intentsSent = async (startedAt: Date): Promise<boolean> => {
      const { rows } = await db.store.transaction((tx) =>
        tx.query<{ target_partition: number; target_from: string }>(
          `SELECT target_partition, target_from::text AS target_from FROM "${db.schema}".dead_letter_ledger
            WHERE consumer = $1 AND state = 'replaying' AND at >= $2`,
          [name, startedAt],
        ),
      );
      const ends = await admin.fetchTopicOffsets(topic);
      return rows.every(
        (row) =>
          BigInt(ends.find((e) => e.partition === row.target_partition)!.high) > BigInt(row.target_from),
      );
    };
    try {
      // Each kill waits for progress the child showed: replayed lines, or an intent in the ledger.
      const kills: Array<{ at: string; lines: number; intents: number; sent: boolean; ms: number }> = [];
      for (const step of plan) {
        const startedAt = new Date();
        const child = startReplay(payload, step.at === 'lines' ? undefined : `${step.at}:${step.batch}`);
        const reached = () => (step.at === 'lines' ? child.count() >= step.lines : child.paused());
        await until(
          `the child at ${JSON.stringify(step)}`,
          () => reached() || child.process.exitCode !== null,
          120_000,
        );
        const kill = {
          at: step.at,
          lines: child.count(),
          intents: 0,
          sent: false,
          ms: Date.now() - startedAt.getTime(),
        };
        if (step.at !== 'lines') {
          // This child's own intents (a killed one's were settled by its recovery).
          kill.intents = (await ledgerStates(startedAt)).replaying ?? 0;
          kill.sent = await intentsSent(startedAt);
        }
        child.process.kill('SIGKILL');
        const { signal, output } = await child.exited;
        expect(signal, output).toBe('SIGKILL');
        kills.push(kill);
      }
      // Every kill landed where it was meant to: half-way, with intents left where planned,
      // their copies in the source for 'sent' and not for 'intent'.
      expect(kills.every((k) => k.lines < total)).toBe(true);
      expect(kills.filter((k) => k.at !== 'lines').every((k) => k.intents > 0)).toBe(true);
      expect(kills.filter((k) => k.at === 'sent').every((k) => k.sent)).toBe(true);
      expect(kills.filter((k) => k.at === 'intent').every((k) => !k.sent)).toBe(true);
      const lastStarted = Date.now();
      const last = startReplay(payload);
      const { code, output } = await last.exited;
      console.log(`[dlq crash ${mode}] last run: ${Date.now() - lastStarted} ms`);
      expect(code, output).toBe(0);
      expect(output).toMatch(/^done \d+$/m);

      // This consumer's effects (the table is shared by the file's tests).
      const effectCounts = async () => {
        const counts = new Map<string, number>();
        for (const row of await db.rows()) {
          if (row.consumer === name) counts.set(row.message_id, (counts.get(row.message_id) ?? 0) + 1);
        }
        return counts;
      };
      await until(`${total} effects`, async () => (await effectCounts()).size >= total, 180_000);
      const effects = await effectCounts();
      const lost = ids.filter((id) => !effects.has(id));
      const doubled = [...effects].filter(([, n]) => n > 1).map(([id]) => id);
      expect({ lost, doubled, distinct: effects.size }).toEqual({ lost: [], doubled: [], distinct: total });

      // Kafka's own claim: one re-sent copy of each in the source, whatever the kills hit.
      const copies = await replayedCopies(topic);
      const missing = ids.filter((id) => !copies.has(id));
      const twice = [...copies].filter(([, n]) => n > 1).map(([id]) => id);
      expect({ missing, twice, copies: copies.size }).toEqual({ missing: [], twice: [], copies: total });
      expect(await ledgerStates()).toEqual({ replayed: total });
      console.log(`[dlq crash ${mode}] kills: ${JSON.stringify(kills)}`);
    } finally {
      await consumer.stop();
    }
  }

  it('1,000 dead letters, the replaying process SIGKILLed 5 times: lost 0, doubled 0', async () => {
    await replayKilled(1000, 'transactional', [
      { at: 'lines', lines: 40 },
      { at: 'sent', batch: 1 },
      { at: 'lines', lines: 150 },
      { at: 'intent', batch: 2 },
      { at: 'sent', batch: 3 },
    ]);
  }, 600_000);

  // No marker in offsets mode: a copy sent twice would be applied twice. Only the ledger's
  // two phases and the recovery keep each effect single.
  it('offsets mode, 200 dead letters, killed twice after the send: lost 0, doubled 0', async () => {
    await replayKilled(200, 'offsets', [
      { at: 'sent', batch: 1 },
      { at: 'sent', batch: 2 },
    ]);
  }, 300_000);
});
