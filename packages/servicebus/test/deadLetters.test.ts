import { randomUUID } from 'node:crypto';
import { ServiceBusClient } from '@azure/service-bus';
import { DeadLetters, type HandlerContext, type Message, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import { waitFor } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// `DeadLetters` (oncely dlq) on our Service Bus emulator and PostgreSQL: 50 dead letters for
// two reasons, listed in failure groups, one group replayed and processed once (effects
// counted from rows) on a duplicate-detection queue, a second replay a no-op, the other
// group discarded with a record.
const hasPostgres = await postgresAvailable();
const schema = `oncely_sb_dlq_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

describe.skipIf(!hasPostgres)('Service Bus dead letters (emulator + PostgreSQL)', () => {
  let emulator: ServiceBusEmulator;
  let client: ServiceBusClient;
  let store: PostgresStore;
  let pool: pg.Pool;

  beforeAll(async () => {
    emulator = await startServiceBusEmulator({ port: 0 });
    client = new ServiceBusClient(emulator.connectionString);
    store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL)`);
  });
  afterAll(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
    await store?.close();
    await client?.close();
    await emulator?.stop();
  });

  async function effects(): Promise<Map<string, number>> {
    const { rows } = await pool.query<{ message_id: string; n: number }>(
      `SELECT message_id, count(*)::int AS n FROM "${schema}".effects GROUP BY message_id`,
    );
    return new Map(rows.map((r) => [r.message_id, r.n]));
  }

  it('lists two failure groups, replays one once, no-ops the second replay, discards the other', async () => {
    const queue = `dlq-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, {
      LockDuration: 'PT30S',
      MaxDeliveryCount: 50,
      RequiresDuplicateDetection: true,
      DuplicateDetectionHistoryTimeWindow: 'PT5M',
    });
    const broken = { on: true };
    const config = {
      name: `dlq-sb-${queue}`,
      broker: {
        type: 'servicebus' as const,
        connectionString: emulator.connectionString,
        queueName: queue,
        maxWaitTimeMs: 300,
      },
      store,
      logger: silentLogger,
      maxAttempts: 2,
      backoff: { initialMs: 10, maxMs: 20 },
      concurrency: 8,
      handler: async (message: Message<{ id: string }>, ctx: HandlerContext) => {
        if (broken.on) throw new Error('payment service down');
        await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
      },
    };
    const consumer = createServiceBusConsumer<{ id: string }>(config as never);
    await consumer.start();
    try {
      const failing = Array.from({ length: 25 }, (_, i) => `fail-${i}`);
      const garbled = Array.from({ length: 25 }, (_, i) => `bad-${i}`);
      const sender = client.createSender(queue);
      await sender.sendMessages([
        ...failing.map((id) => ({ messageId: id, body: Buffer.from(JSON.stringify({ id })) })),
        ...garbled.map((id, i) => ({ messageId: id, body: Buffer.from(`{"id": "${id}", broken ${i}`) })),
      ]);
      await sender.close();
      await waitFor(() => emulator.inspect(queue).deadLettered === 50, {
        timeoutMs: 60_000,
        description: '50 dead letters',
      });

      const dlq = await DeadLetters.open(config as never);
      const { letters, groups } = await dlq.list();
      expect(letters).toHaveLength(50);
      expect(groups.map((g) => [g.reason, g.count]).sort()).toEqual([
        ['invalid-body', 25],
        ['max-attempts', 25],
      ]);
      expect((await dlq.list()).letters).toHaveLength(50);

      const dry = await dlq.replay({ group: 'max-attempts' }, { dryRun: true });
      expect(dry.replayed.sort()).toEqual([...failing].sort());
      expect(emulator.inspect(queue).deadLettered).toBe(50);

      broken.on = false;
      const replayed = await dlq.replay({ group: 'max-attempts' });
      expect(replayed.replayed).toHaveLength(25);
      await waitFor(async () => (await effects()).size === 25, {
        timeoutMs: 60_000,
        description: '25 effects',
      });
      const counted = await effects();
      expect([...counted.keys()].sort()).toEqual([...failing].sort());
      expect([...counted.values()].every((n) => n === 1)).toBe(true);
      expect(emulator.inspect(queue).deadLettered).toBe(25);

      expect(await dlq.replay({ group: 'max-attempts' })).toMatchObject({
        replayed: [],
        alreadyProcessed: [],
      });
      const discarded = await dlq.discard({ group: 'invalid-body' }, { by: 'tester' });
      expect(discarded.discarded).toHaveLength(25);
      expect(emulator.inspect(queue).deadLettered).toBe(0);
      expect(await store.deadLetterLog.discards(config.name, 'bad-5')).toMatchObject([
        { reason: 'invalid-body', discardedBy: 'tester' },
      ]);
      await waitFor(() => emulator.inspect(queue).total === 0, {
        timeoutMs: 30_000,
        description: 'queue drained',
      });
      expect([...(await effects()).values()].reduce((a, b) => a + b, 0)).toBe(25);
    } finally {
      await consumer.stop();
    }
  }, 120_000);
});
