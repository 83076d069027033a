import { randomUUID } from 'node:crypto';
import { ServiceBusClient, type ServiceBusReceivedMessage } from '@azure/service-bus';
import { type IdStrategy, type Message, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// Delayed retries as scheduled copies (issue #34, defects 1 and 3), with the real
// @azure/service-bus client on the emulator and the real PostgreSQL store: a copy carries
// the original's body bytes, content type and properties exactly, and the original's
// Oncely ID whatever the ID strategy, so attempts count across copies.

const hasPostgres = await postgresAvailable();
const suite = hasPostgres ? describe : describe.skip;

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;
let store: PostgresStore;
let pool: pg.Pool;
const schema = `oncely_sb_copies_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

suite('@oncely/servicebus retry copies', () => {
  beforeAll(async () => {
    emulator = await startServiceBusEmulator({ port: 0 });
    client = new ServiceBusClient(emulator.connectionString);
    store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, attempt int)`);
  });

  afterAll(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
    await store?.close();
    await client?.close();
    await emulator?.stop();
  });

  it('a scheduled copy carries the body bytes, content type and properties of the original exactly', async () => {
    const queue = `copy-body-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, { LockDuration: 'PT5S' });
    const bytes = Buffer.from([0, 1, 2, 250, 251, 255, 0x7b, 0x22]);
    const seen: Array<{
      attempt: number;
      body: unknown;
      contentType: unknown;
      subject: unknown;
      props: unknown;
    }> = [];
    let done!: () => void;
    const finished = new Promise<void>((resolve) => {
      done = resolve;
    });
    const consumer = createServiceBusConsumer({
      name: `copy-body-${randomUUID().slice(0, 8)}`,
      broker: { connectionString: emulator.connectionString, queueName: queue, maxWaitTimeMs: 300 },
      store,
      logger: silentLogger,
      bodyFormat: 'buffer',
      maxAttempts: 5,
      backoff: { initialMs: 100, maxMs: 200, jitter: 0 },
      handler: async (message: Message<Buffer>, ctx) => {
        const raw = message.raw as ServiceBusReceivedMessage;
        // The adapter's own properties (oncely-*) are the only difference allowed.
        const props = Object.fromEntries(
          Object.entries(raw.applicationProperties ?? {}).filter(([key]) => !key.startsWith('oncely-')),
        );
        seen.push({
          attempt: ctx.attempt,
          body: raw.body,
          contentType: raw.contentType,
          subject: raw.subject,
          props,
        });
        if (ctx.attempt < 3) throw new Error(`planned failure ${ctx.attempt}`);
        done();
      },
    });
    await consumer.start();
    await client.createSender(queue).sendMessages({
      body: bytes,
      messageId: 'bin-1',
      contentType: 'application/x-custom',
      subject: 'the-subject',
      applicationProperties: { tenant: 'acme', n: 7, flag: true },
    });
    await finished;
    await consumer.stop();
    expect(seen.map((s) => s.attempt)).toEqual([1, 2, 3]);
    for (const s of seen) {
      expect(Buffer.isBuffer(s.body)).toBe(true);
      expect((s.body as Buffer).equals(bytes)).toBe(true);
      expect(s.contentType).toBe('application/x-custom');
      expect(s.subject).toBe('the-subject');
      expect(s.props).toEqual({ tenant: 'acme', n: 7, flag: true });
    }
  });

  for (const idStrategy of ['broker', 'content-hash'] as IdStrategy[]) {
    it(`idStrategy '${idStrategy}' with 'schedule': attempts count across copies, an always-failing message is dead-lettered at maxAttempts`, async () => {
      const queue = `copy-id-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { LockDuration: 'PT5S', MaxDeliveryCount: 100 });
      const attempts: Array<{ id: string; attempt: number }> = [];
      const consumer = createServiceBusConsumer({
        name: `copy-id-${randomUUID().slice(0, 8)}`,
        broker: { connectionString: emulator.connectionString, queueName: queue, maxWaitTimeMs: 300 },
        store,
        logger: silentLogger,
        idStrategy,
        maxAttempts: 3,
        backoff: { initialMs: 50, maxMs: 100, jitter: 0 },
        handler: async (message: Message<unknown>, ctx) => {
          attempts.push({ id: message.id, attempt: ctx.attempt });
          throw new Error('always');
        },
      });
      const deadLettered = new Promise<void>((resolve) => consumer.on('deadLettered', () => resolve()));
      await consumer.start();
      await client.createSender(queue).sendMessages({ body: { order: 1 }, messageId: 'always-1' });
      const outcome = await Promise.race([
        deadLettered.then(() => 'dead-lettered'),
        new Promise((resolve) => setTimeout(() => resolve('still looping after 20 s'), 20_000)),
      ]);
      await consumer.stop();
      expect(outcome).toBe('dead-lettered');
      expect(new Set(attempts.map((a) => a.id)).size).toBe(1);
      expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
      expect(emulator.inspect(queue)).toMatchObject({ total: 0, deadLettered: 1 });
    }, 40_000);
  }

  it("idStrategy 'broker': an original whose lock is lost after its copy was scheduled, and the copy, have one effect", async () => {
    const queue = `copy-lost-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, { LockDuration: 'PT5S', MaxDeliveryCount: 100 });
    const runs: Array<{ id: string; attempt: number }> = [];
    let settledBoth!: () => void;
    const both = new Promise<void>((resolve) => {
      settledBoth = resolve;
    });
    let outcomes = 0;
    const consumer = createServiceBusConsumer({
      name: `copy-lost-${randomUUID().slice(0, 8)}`,
      broker: { connectionString: emulator.connectionString, queueName: queue, maxWaitTimeMs: 300 },
      store,
      logger: silentLogger,
      idStrategy: 'broker',
      maxAttempts: 5,
      backoff: { initialMs: 1500, maxMs: 1500, jitter: 0 },
      handler: async (message: Message<unknown>, ctx) => {
        runs.push({ id: message.id, attempt: ctx.attempt });
        await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, attempt) VALUES ('lost-1', $1)`, [
          ctx.attempt,
        ]);
        if (runs.length === 1) {
          // The original's lock goes before its settlement: the copy is scheduled, the
          // complete fails, and the original comes back at once, ahead of the copy.
          emulator.expireLocks(queue);
          throw new Error('planned failure');
        }
      },
    });
    // The original's redelivery and the copy: one processed, the other a duplicate.
    for (const name of ['processed', 'duplicate'] as const) {
      consumer.on(name, () => {
        if (++outcomes === 2) settledBoth();
      });
    }
    await consumer.start();
    await client.createSender(queue).sendMessages({ body: { order: 'lost-1' }, messageId: 'lost-1' });
    const outcome = await Promise.race([
      both.then(() => 'both settled'),
      new Promise((resolve) => setTimeout(() => resolve('timed out'), 20_000)),
    ]);
    await consumer.stop();
    expect(outcome).toBe('both settled');
    const { rows } = await pool.query(`SELECT attempt FROM "${schema}".effects WHERE message_id = 'lost-1'`);
    expect(rows).toHaveLength(1);
    expect(new Set(runs.map((r) => r.id)).size).toBe(1);
  }, 40_000);
});
