import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type ConsumerConfig, createConsumer, silentLogger } from '@oncely/core';
import { assertTopology, DETAIL_HEADER, REASON_HEADER } from '@oncely/rabbitmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestStore,
  DATABASE_URL,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// A replay of 1,000 dead letters whose process is SIGKILLed five times half-way, then run
// to the end: every message ends processed exactly once (effects counted from rows), none
// is lost (neither in the DLQ nor processed), none doubled. Where each kill lands is up to
// the scheduler: after a confirmed re-send and before its ack the message is in both queues,
// and the consumer's marker absorbs the second copy.
const available = await servicesAvailable();
const CHILD = fileURLToPath(new URL('./dlqReplayChild.mjs', import.meta.url));
const TOTAL = 1000;

interface ReplayChild {
  process: ChildProcess;
  /** Resolves once the child printed `lines` replayed lines (or ended). */
  replayed(lines: number): Promise<number>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>;
}

function startReplay(payload: unknown): ReplayChild {
  const child = spawn(process.execPath, [CHILD], {
    env: { ...process.env, DLQ_CHILD: JSON.stringify(payload) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let count = 0;
  const waiters = new Set<() => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
    count = (output.match(/^replayed /gm) ?? []).length;
    for (const wake of waiters) wake();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>(
    (resolve) => {
      child.once('exit', (code, signal) => {
        for (const wake of waiters) wake();
        resolve({ code, signal, output });
      });
    },
  );
  return {
    process: child,
    exited,
    replayed: (lines) =>
      new Promise((resolve) => {
        const check = () => {
          if (count >= lines || child.exitCode !== null || child.signalCode !== null) {
            waiters.delete(check);
            resolve(count);
          }
        };
        waiters.add(check);
        check();
      }),
  };
}

describe.skipIf(!available)(
  'RabbitMQ dead-letter replay killed half-way (real RabbitMQ + PostgreSQL)',
  () => {
    let raw: RawBroker;
    let db: TestStore;
    const queue = unique('dlqcrash');

    beforeAll(async () => {
      raw = await rawBroker();
      db = await createTestStore();
    });
    afterAll(async () => {
      await deleteTopology(raw, queue).catch(() => {});
      await db?.cleanup();
      await raw?.close();
    });

    it('1,000 dead letters, the replaying process SIGKILLed 5 times: lost 0, doubled 0', async () => {
      const channel = await raw.connection.createConfirmChannel();
      await assertTopology(channel, { queue });
      const ids = Array.from({ length: TOTAL }, (_, i) => `${queue}-${i}`);
      for (const id of ids) {
        channel.sendToQueue(`${queue}.dlq`, Buffer.from(JSON.stringify({ id })), {
          messageId: id,
          persistent: true,
          contentType: 'application/json',
          headers: { [REASON_HEADER]: 'max-attempts', [DETAIL_HEADER]: 'failed 5 times; last error: down' },
        });
      }
      await channel.waitForConfirms();
      await channel.close();

      const config: ConsumerConfig<{ id: string }> = {
        name: `c-${queue}`,
        broker: { type: 'rabbitmq', url: RABBITMQ_URL, queue },
        store: db.store,
        logger: silentLogger,
        concurrency: 8,
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        },
      };
      const consumer = await createConsumer(config);
      await consumer.start();
      const payload = {
        connectionString: DATABASE_URL,
        schema: db.schema,
        config: { name: config.name, broker: config.broker },
      };
      try {
        const kills: number[] = [];
        for (const after of [40, 90, 60, 150, 110]) {
          const child = startReplay(payload);
          const seen = await child.replayed(after);
          child.process.kill('SIGKILL');
          const { signal, output } = await child.exited;
          expect(signal, output).toBe('SIGKILL');
          kills.push(seen);
          // Never in neither: what is not processed yet is in the DLQ or the work queue.
          await waitFor(async () => (await raw.ready(`${queue}.dlq`)) > 0, 'the DLQ copies requeued');
        }
        expect(kills.every((n) => n >= 40 && n < TOTAL)).toBe(true);
        const last = startReplay(payload);
        const { code, output } = await last.exited;
        expect(code, output).toBe(0);
        expect(output).toMatch(/^done \d+$/m);

        await waitFor(async () => (await db.effectCount()) >= TOTAL, `${TOTAL} effects`, 120_000);
        await waitFor(async () => (await raw.ready(queue)) === 0, 'the work queue drained', 60_000);
        expect(await raw.ready(`${queue}.dlq`)).toBe(0);
        const effects = await db.effects();
        const lost = ids.filter((id) => !effects.has(id));
        const doubled = [...effects].filter(([, n]) => n > 1).map(([id]) => id);
        expect({ lost, doubled, distinct: effects.size }).toEqual({ lost: [], doubled: [], distinct: TOTAL });
      } finally {
        await consumer.stop();
      }
    }, 300_000);
  },
);
