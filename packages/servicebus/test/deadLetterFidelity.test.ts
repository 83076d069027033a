import { randomUUID } from 'node:crypto';
import { ServiceBusClient, type ServiceBusReceivedMessage } from '@azure/service-bus';
import { DeadLetters, type IdStrategy, type Message, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// Hostile review of `oncely dlq replay` on Service Bus: a replayed message must come back
// as the consumer saw it the first time (session, correlation ID, content type, subject,
// application properties) and under the ID `list` showed, whatever the ID strategy.
const hasPostgres = await postgresAvailable();
const schema = `oncely_sb_dlqf_${randomUUID().replaceAll('-', '').slice(0, 10)}`;

describe.skipIf(!hasPostgres)('Service Bus dead-letter replay fidelity (emulator + PostgreSQL)', () => {
  let emulator: ServiceBusEmulator;
  let client: ServiceBusClient;
  let store: PostgresStore;

  beforeAll(async () => {
    emulator = await startServiceBusEmulator({ port: 0 });
    client = new ServiceBusClient(emulator.connectionString);
    store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await client?.close();
    await emulator?.stop();
  });

  /** Dead-letters two messages, lists them, replays them with the handler fixed; returns what the handler saw after the replay. */
  async function roundTrip(options: { sessions: boolean; idStrategy?: IdStrategy }) {
    const queue = `dlqf-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, {
      LockDuration: 'PT30S',
      MaxDeliveryCount: 50,
      RequiresSession: options.sessions,
    });
    const broken = { on: true };
    const seen: Message[] = [];
    const config = {
      name: `dlqf-${queue}`,
      broker: {
        type: 'servicebus' as const,
        connectionString: emulator.connectionString,
        queueName: queue,
        sessions: options.sessions,
        maxWaitTimeMs: 300,
      },
      ...(options.idStrategy ? { idStrategy: options.idStrategy } : {}),
      store,
      logger: silentLogger,
      maxAttempts: 2,
      backoff: { initialMs: 10, maxMs: 20 },
      handler: async (message: Message) => {
        if (broken.on) throw new Error('downstream down');
        seen.push(message);
      },
    };
    const consumer = createServiceBusConsumer(config as never);
    await consumer.start();
    try {
      const sender = client.createSender(queue);
      await sender.sendMessages(
        ['a', 'b'].map((n) => ({
          messageId: `m-${n}`,
          body: { n },
          contentType: 'application/json',
          correlationId: `corr-${n}`,
          subject: 'order-placed',
          ...(options.sessions ? { sessionId: `s-${n}` } : {}),
          applicationProperties: { tenant: `t-${n}`, 'x-id': `custom-${n}` },
        })),
      );
      await sender.close();
      await waitFor(() => emulator.inspect(queue).deadLettered === 2, {
        timeoutMs: 60_000,
        description: '2 dead letters',
      });
      const dlq = await DeadLetters.open(config as never);
      const listed = (await dlq.list()).letters.map((l) => l.messageId).sort();
      broken.on = false;
      const report = await dlq.replay({});
      await waitFor(() => seen.length === 2, {
        timeoutMs: 30_000,
        description: `both replayed and handled (${JSON.stringify({ listed, report, queue: emulator.inspect(queue), seen: seen.map((m) => m.id) })})`,
      });
      return { listed, report, seen: seen.sort((x, y) => x.id.localeCompare(y.id)) };
    } finally {
      await consumer.stop();
    }
  }

  it('a session queue: the replayed copy keeps its session, correlation ID, content type, subject and properties', async () => {
    const { listed, seen } = await roundTrip({ sessions: true });
    expect(listed).toEqual(['m-a', 'm-b']);
    expect(seen.map((m) => m.id)).toEqual(['m-a', 'm-b']);
    expect(seen.map((m) => m.orderingKey)).toEqual(['s-a', 's-b']);
    const raw = seen.map((m) => m.raw as ServiceBusReceivedMessage);
    expect(raw.map((r) => [r.correlationId, r.contentType, r.subject])).toEqual([
      ['corr-a', 'application/json', 'order-placed'],
      ['corr-b', 'application/json', 'order-placed'],
    ]);
    expect(seen.map((m) => m.attributes.tenant)).toEqual(['t-a', 't-b']);
    expect(seen.map((m) => m.body)).toEqual([{ n: 'a' }, { n: 'b' }]);
  }, 120_000);

  it('a custom attribute ID strategy: the consumer sees the listed ID again', async () => {
    const { listed, seen } = await roundTrip({ sessions: false, idStrategy: { attribute: 'x-id' } });
    expect(listed).toEqual(['custom-a', 'custom-b']);
    expect(seen.map((m) => m.id)).toEqual(['custom-a', 'custom-b']);
  }, 120_000);

  it("the 'broker' ID strategy: the consumer sees the ID that list showed (and dry run checked)", async () => {
    const { listed, seen } = await roundTrip({ sessions: false, idStrategy: 'broker' });
    expect(seen.map((m) => m.id).sort()).toEqual(listed);
  }, 120_000);

  it('two operators replaying at once: each dead letter is back in the queue once', async () => {
    const queue = `dlqtwo-${randomUUID().slice(0, 8)}`;
    emulator.createQueue(queue, { LockDuration: 'PT30S', MaxDeliveryCount: 50 });
    const config = {
      name: `dlqtwo-${queue}`,
      broker: {
        type: 'servicebus' as const,
        connectionString: emulator.connectionString,
        queueName: queue,
        maxWaitTimeMs: 300,
      },
      store,
      logger: silentLogger,
      maxAttempts: 1,
      handler: async () => {
        throw new Error('down');
      },
    };
    const consumer = createServiceBusConsumer(config as never);
    await consumer.start();
    const ids = Array.from({ length: 60 }, (_, i) => `two-${i}`);
    try {
      const sender = client.createSender(queue);
      await sender.sendMessages(ids.map((id) => ({ messageId: id, body: { id } })));
      await sender.close();
      await waitFor(() => emulator.inspect(queue).deadLettered === 60, {
        timeoutMs: 60_000,
        description: '60 dead letters',
      });
    } finally {
      await consumer.stop();
    }
    const dlq = await DeadLetters.open(config as never);
    const [a, b] = await Promise.all([dlq.replay({}), dlq.replay({})]);
    expect(a.replayed.length + b.replayed.length).toBe(60);
    expect(emulator.inspect(queue).deadLettered).toBe(0);
    const receiver = client.createReceiver(queue, { receiveMode: 'receiveAndDelete' });
    const back: string[] = [];
    for (;;) {
      const batch = await receiver.receiveMessages(100, { maxWaitTimeInMs: 1000 });
      if (batch.length === 0) break;
      for (const m of batch) back.push(String(m.applicationProperties?.['oncely-message-id']));
    }
    await receiver.close();
    expect(back.sort()).toEqual([...ids].sort());
  }, 120_000);
});
