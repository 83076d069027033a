import { randomUUID } from 'node:crypto';
import { ServiceBusClient } from '@azure/service-bus';
import { isOncelyError, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import { Latch, waitFor } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// Issue #34, defect 2, last clause: a session lock the adapter lost while a handler ran
// (the session lock ran out: SessionKeeper could not renew it) was counted as a failed
// attempt of the handler. The handler did not fail; the consumer lost the message, and
// attempts count failures, not lost locks: the run is released, not counted.
// With the real @azure/service-bus client on the emulator and the real PostgreSQL store.

const hasPostgres = await postgresAvailable();
const suite = hasPostgres ? describe : describe.skip;

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;
let store: PostgresStore;
let pool: pg.Pool;
const schema = `oncely_sb_lost_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

suite('@oncely/servicebus: a session lock lost while the handler runs', () => {
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

  it('is released, not counted as a failed attempt: the redelivery runs as attempt 1', async () => {
    const queue = `lost-session-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, { RequiresSession: true, LockDuration: 'PT2S', MaxDeliveryCount: 100 });
    const attempts: number[] = [];
    const abortReasons: unknown[] = [];
    const running = new Latch();
    const events: string[] = [];
    const consumer = createServiceBusConsumer({
      name: `lost-session-${randomUUID().slice(0, 8)}`,
      broker: {
        connectionString: emulator.connectionString,
        queueName: queue,
        sessions: true,
        maxWaitTimeMs: 300,
      },
      store,
      logger: silentLogger,
      maxAttempts: 5,
      backoff: { initialMs: 100, maxMs: 100, jitter: 0 },
      handler: async (message, ctx) => {
        attempts.push(ctx.attempt);
        if (attempts.length === 1) {
          running.open();
          // Runs until the consumer tells it the lock is gone, then stops as a handler
          // should: by throwing the signal's reason.
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 20_000);
            ctx.signal.addEventListener(
              'abort',
              () => {
                clearTimeout(timer);
                resolve();
              },
              { once: true },
            );
          });
          abortReasons.push(ctx.signal.reason);
          ctx.signal.throwIfAborted();
          throw new Error('the lock was never reported lost');
        }
        await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id) VALUES ($1)`, [message.id]);
      },
    });
    for (const name of ['failed', 'retried', 'released', 'leaseLost', 'ackFailed', 'processed'] as const) {
      consumer.on(name, (e: { messageId?: string }) => events.push(`${name} ${e.messageId}`));
    }
    await consumer.start();
    const sender = client.createSender(queue);
    try {
      await sender.sendMessages({ body: 'x', messageId: 'held', sessionId: 's1' });
      await running.wait();
      // The session lock runs out under the running handler, as when it cannot be renewed.
      expect(emulator.expireSessionLock(queue, 's1')).toBe(true);
      await waitFor(() => events.includes('processed held'), {
        timeoutMs: 30_000,
        description: `the redelivery processed (${events.join(', ')})`,
      });
    } finally {
      await consumer.stop();
      await sender.close();
    }
    expect(isOncelyError(abortReasons[0], 'LEASE_LOST')).toBe(true);
    // Attempts count failures, not lost locks.
    expect(attempts).toEqual([1, 1]);
    // Given back (the service already had it: the release is done, not an ackFailed).
    expect(events).toContain('leaseLost held');
    expect(events).toContain('released held');
    expect(events.filter((e) => /^(failed|retried|ackFailed) /.test(e))).toEqual([]);
    const { rows } = await pool.query(`SELECT message_id FROM "${schema}".effects`);
    expect(rows).toEqual([{ message_id: 'held' }]);
  }, 60_000);
});
