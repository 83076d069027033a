import { ServiceBusClient } from '@azure/service-bus';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `cli_dlq_${process.pid}_${Date.now()}`;

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;

async function inspect(id: string, env: Record<string, string>) {
  let out = '';
  let err = '';
  const code = await main(['inspect', 'payments', id, '--schema', schema], {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { DATABASE_URL, ...env },
  });
  expect(err).toBe('');
  return { code, report: JSON.parse(out) };
}

describe('oncely inspect: what the dead-letter queue holds (Service Bus emulator)', () => {
  beforeAll(async () => {
    emulator = await startServiceBusEmulator({ port: 0 });
    client = new ServiceBusClient(emulator.connectionString);
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
    await store.migrate();
    for (let i = 0; i < 5; i++) await store.recordAttempt({ consumer: 'payments', messageId: 'poison-1' });
    await store.close();
  });

  afterAll(async () => {
    await client?.close();
    await emulator?.stop();
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  it('finds the dead-lettered copy by the consumer ID strategy, and says when there is none', async () => {
    emulator.createQueue('payments');
    const sender = client.createSender('payments');
    await sender.sendMessages([
      { messageId: 'poison-1', body: { n: 1 } },
      { messageId: 'other', body: { n: 2 } },
    ]);
    await sender.close();
    const receiver = client.createReceiver('payments');
    for (const message of await receiver.receiveMessages(2, { maxWaitTimeInMs: 5000 })) {
      await receiver.deadLetterMessage(message, {
        deadLetterReason: 'max-attempts',
        deadLetterErrorDescription: 'failed 5 times',
      });
    }
    await receiver.close();
    const env = {
      ONCELY_NAME: 'payments',
      ONCELY_BROKER_TYPE: 'servicebus',
      ONCELY_BROKER_CONNECTION_STRING: emulator.connectionString,
      ONCELY_BROKER_QUEUE_NAME: 'payments',
    };
    const poison = await inspect('poison-1', env);
    expect(poison.code).toBe(1);
    expect(poison.report.deadLetters).toEqual([
      expect.objectContaining({ reason: 'max-attempts', description: 'failed 5 times' }),
    ]);
    expect(poison.report.explanation).toMatch(
      /dead-lettered with reason 'max-attempts'.*The dead-letter queue holds 1 copy\(ies\): reason 'max-attempts'$/,
    );
    const never = await inspect('never-sent', env);
    expect(never.report.deadLetters).toEqual([]);
    expect(never.report.explanation).toMatch(
      /^no trace in the store: .*The dead-letter queue does not hold it$/,
    );
    // A broker that cannot peek says so.
    const memory = await inspect('never-sent', { ONCELY_NAME: 'payments', ONCELY_BROKER_TYPE: 'memory' });
    expect(memory.report.explanation).toMatch(
      /memory cannot list its dead letters without consuming them\)$/,
    );
  });
});
