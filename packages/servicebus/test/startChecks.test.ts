import { randomUUID } from 'node:crypto';
import { ServiceBusClient } from '@azure/service-bus';
import { isOncelyError, type Logger, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// start() checks what it can of the entity (issue #34, defect 5), with the real client on
// the emulator: a missing entity and a sessions mismatch fail with BROKER_MISCONFIGURED,
// and the lock duration comes from the deliveries, not from a longer configured value.

const hasPostgres = await postgresAvailable();
const suite = hasPostgres ? describe : describe.skip;

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;
let store: PostgresStore;
const schema = `oncely_sb_start_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

async function startError(broker: Record<string, unknown>): Promise<unknown> {
  const consumer = createServiceBusConsumer({
    name: `start-${randomUUID().slice(0, 8)}`,
    broker: { connectionString: emulator.connectionString, maxWaitTimeMs: 300, ...broker },
    store,
    logger: silentLogger,
    handler: async () => {},
  });
  const error = await consumer.start().then(
    () => undefined,
    (e: unknown) => e,
  );
  await consumer.stop().catch(() => {});
  return error;
}

suite('@oncely/servicebus start() checks', () => {
  beforeAll(async () => {
    emulator = await startServiceBusEmulator({ port: 0 });
    client = new ServiceBusClient(emulator.connectionString);
    store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
  });

  afterAll(async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await pool.end();
    await store?.close();
    await client?.close();
    await emulator?.stop();
  });

  it('sessions: true on an entity that does not exist fails with BROKER_MISCONFIGURED', async () => {
    const error = await startError({ queueName: `missing-${randomUUID().slice(0, 8)}`, sessions: true });
    expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
  }, 30_000);

  it('sessions: false on a RequiresSession queue fails with BROKER_MISCONFIGURED', async () => {
    const queue = `needs-session-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, { RequiresSession: true });
    const error = await startError({ queueName: queue });
    expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
    expect(String((error as Error).message)).toMatch(/session/i);
  }, 30_000);

  it('sessions: true on a queue without sessions fails with BROKER_MISCONFIGURED', async () => {
    const queue = `no-session-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, {});
    const error = await startError({ queueName: queue, sessions: true });
    expect(isOncelyError(error, 'BROKER_MISCONFIGURED')).toBe(true);
    expect(String((error as Error).message)).toMatch(/session/i);
  }, 30_000);

  it('a configured lockDurationMs longer than the entity LockDuration is warned about and ignored: the lock is renewed in time', async () => {
    const queue = `lock-${randomUUID().slice(0, 8)}`;
    // 6 s: the lease keeper renews every half lock, so a stalled process (a CPU-starved
    // runner) has 3 s before the lock runs out; with 2 s it had 1 s.
    emulator.createQueue(queue, { LockDuration: 'PT6S' });
    const warnings: string[] = [];
    const logger: Logger = { ...silentLogger, warn: (message: string) => warnings.push(message) };
    const lost: unknown[] = [];
    let done!: () => void;
    const processed = new Promise<void>((resolve) => {
      done = resolve;
    });
    const consumer = createServiceBusConsumer({
      name: `lock-${randomUUID().slice(0, 8)}`,
      broker: {
        connectionString: emulator.connectionString,
        queueName: queue,
        maxWaitTimeMs: 300,
        lockDurationMs: 60_000,
      },
      store,
      logger,
      handlerTimeoutMs: 30_000,
      handler: async () => {
        // Longer than the entity's 6 s lock: only renewals at its pace keep it (renewing
        // at half the configured 60 s, the first would come after the lock is gone).
        await new Promise((resolve) => setTimeout(resolve, 7500));
      },
    });
    consumer.on('leaseLost', (e) => lost.push(e));
    consumer.on('processed', () => done());
    await consumer.start();
    await client.createSender(queue).sendMessages({ body: 'slow', messageId: 'slow-1' });
    await processed;
    await consumer.stop();
    expect(lost).toEqual([]);
    expect(warnings.some((w) => /lockDurationMs/.test(w))).toBe(true);
    expect(emulator.inspect(queue)).toMatchObject({ total: 0 });
  }, 30_000);
});
