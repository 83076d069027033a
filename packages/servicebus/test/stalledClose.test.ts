import { randomUUID } from 'node:crypto';
import { ServiceBusClient } from '@azure/service-bus';
import { silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import { TcpProxy } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer, openDeadLetters } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// A dead-letter session's close() must end when the connection to Service Bus goes silent
// (a black-holing network): the abandons and the link and connection closes each wait
// for an answer, a minute apiece and more, so `oncely dlq` hung as it finished (still
// unsettled after 240 s with three letters held). A consumer's stop() likewise: its
// receive never returned (still unsettled after 200 s).
const hasPostgres = await postgresAvailable();
const schema = `oncely_sb_stall_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

/** Resolves with what `promise` gave, or with 'hung' after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), ms);
  });
  return Promise.race([promise, hung]).finally(() => clearTimeout(timer));
}

describe.skipIf(!hasPostgres)(
  'Service Bus close with a stalled connection (emulator through a proxy)',
  () => {
    let emulator: ServiceBusEmulator;
    let client: ServiceBusClient;
    let store: PostgresStore;
    let proxy: TcpProxy;
    let proxied: string;

    beforeAll(async () => {
      emulator = await startServiceBusEmulator({ port: 0 });
      client = new ServiceBusClient(emulator.connectionString);
      store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
      await store.migrate();
      const port = Number(/sb:\/\/[^:]+:(\d+)/.exec(emulator.connectionString)![1]);
      proxy = new TcpProxy({ host: '127.0.0.1', port });
      const through = await proxy.start();
      proxied = emulator.connectionString.replace(`:${port};`, `:${through};`);
    });
    afterEach(() => proxy.unstall());
    afterAll(async () => {
      await proxy?.close();
      await store?.close();
      const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
      await client?.close();
      await emulator?.stop();
    });

    it("a dead-letter session's close() on a silent connection settles", async () => {
      const queue = `stall-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { LockDuration: 'PT30S' });
      const sender = client.createSender(queue);
      await sender.sendMessages([0, 1, 2].map((i) => ({ messageId: `m${i}`, body: { i } })));
      await sender.close();
      const receiver = client.createReceiver(queue);
      const got = await receiver.receiveMessages(3, { maxWaitTimeInMs: 2000 });
      for (const m of got)
        await receiver.deadLetterMessage(m, {
          deadLetterReason: 'test',
          deadLetterErrorDescription: 'stalled close',
        });
      await receiver.close();
      const session = await openDeadLetters({
        name: `c-${queue}`,
        broker: { type: 'servicebus', connectionString: proxied, queueName: queue },
        store,
        logger: silentLogger,
        handler: async () => {},
      } as never);
      expect(await session.read()).toHaveLength(3);
      proxy.stall();
      expect(await within(session.close(), 60_000)).toBeUndefined();
      // Nothing lost: the three stay in the dead-letter sub-queue (locked until LockDuration).
      expect(emulator.inspect(queue).deadLettered).toBe(3);
    }, 120_000);

    it("a consumer's stop() on a silent connection settles", async () => {
      const queue = `stall-${randomUUID().slice(0, 8)}`;
      emulator.createQueue(queue, { LockDuration: 'PT30S' });
      const consumer = createServiceBusConsumer({
        name: `c-${queue}`,
        broker: { connectionString: proxied, queueName: queue, maxWaitTimeMs: 300 },
        store,
        logger: silentLogger,
        handler: async () => {},
      } as never);
      await consumer.start();
      proxy.stall();
      expect(await within(consumer.stop(), 60_000)).toBeUndefined();
    }, 120_000);
  },
);
