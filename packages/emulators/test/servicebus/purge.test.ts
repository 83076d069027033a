// Batch delete (`com.microsoft:batch-delete-messages`) driven by the SDK that sends it:
// @azure/service-bus 7.10.0-beta.2 (`deleteMessages`, `purgeMessages`), installed beside
// the project's 7.9.5 as the alias @azure/service-bus-710. Nothing here is mocked.
import { ServiceBusClient } from '@azure/service-bus-710';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName, waitUntil } from './support.js';

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0 });
  client = new ServiceBusClient(emulator.connectionString);
});

afterAll(async () => {
  await client?.close();
  await emulator?.stop();
});

async function send(entity: string, count: number, from = 0, sessionId?: string): Promise<void> {
  const sender = client.createSender(entity);
  const bodies = Array.from({ length: count }, (_, n) => ({ body: from + n, sessionId }));
  for (let i = 0; i < bodies.length; i += 100) await sender.sendMessages(bodies.slice(i, i + 100));
  await sender.close();
}

async function bodiesLeft(entity: string): Promise<number[]> {
  const receiver = client.createReceiver(entity);
  const peeked = await receiver.peekMessages(5000);
  await receiver.close();
  return peeked.map((m) => m.body as number);
}

describe('batch delete (SDK 7.10 deleteMessages / purgeMessages)', () => {
  it('deleteMessages deletes up to maxMessageCount, oldest first, and returns how many', async () => {
    const queue = uniqueName('delete-count');
    emulator.createQueue(queue);
    await send(queue, 5);
    const receiver = client.createReceiver(queue);
    expect(await receiver.deleteMessages({ maxMessageCount: 2 })).toBe(2);
    expect(await bodiesLeft(queue)).toEqual([2, 3, 4]);
    expect(await receiver.deleteMessages({ maxMessageCount: 10 })).toBe(3);
    // Nothing left: the emulator answers 204 + message-not-found, which the client reads as 0.
    expect(await receiver.deleteMessages({ maxMessageCount: 10 })).toBe(0);
    expect(emulator.inspect(queue).total).toBe(0);
    await receiver.close();
  });

  it('beforeEnqueueTime keeps what was enqueued after the cutoff', async () => {
    const queue = uniqueName('delete-before');
    emulator.createQueue(queue);
    await send(queue, 3);
    const receiver = client.createReceiver(queue);
    const peeked = await receiver.peekMessages(3);
    const cutoff = new Date(Math.max(...peeked.map((m) => m.enqueuedTimeUtc!.getTime())));
    // The next messages must be enqueued after the cutoff (inclusive, in milliseconds).
    await waitUntil(() => Date.now() > cutoff.getTime(), 'the clock to pass the cutoff');
    await send(queue, 2, 100);
    expect(await receiver.purgeMessages({ beforeEnqueueTime: cutoff })).toBe(3);
    expect(await bodiesLeft(queue)).toEqual([100, 101]);
    await receiver.close();
  });

  it('purgeMessages loops over batches of 500 until the entity is empty', async () => {
    const queue = uniqueName('purge');
    emulator.createQueue(queue);
    await send(queue, 1203);
    expect(emulator.inspect(queue).active).toBe(1203);
    const receiver = client.createReceiver(queue);
    expect(await receiver.purgeMessages()).toBe(1203);
    expect(emulator.inspect(queue).total).toBe(0);
    await receiver.close();
  });

  it('locked messages stay; deferred ones are deleted; scheduled ones are not enqueued yet', async () => {
    const queue = uniqueName('purge-states');
    emulator.createQueue(queue, { LockDuration: 'PT30S' });
    await send(queue, 3);
    const sender = client.createSender(queue);
    await sender.scheduleMessages({ body: 'later' }, new Date(Date.now() + 60_000));
    await sender.close();
    const receiver = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
    const [locked, toDefer] = await receiver.receiveMessages(2, { maxWaitTimeInMs: 5000 });
    await receiver.deferMessage(toDefer!);
    expect(emulator.inspect(queue)).toMatchObject({ active: 1, locked: 1, deferred: 1, scheduled: 1 });

    const purger = client.createReceiver(queue);
    expect(await purger.purgeMessages()).toBe(2);
    expect(emulator.inspect(queue)).toMatchObject({ active: 0, locked: 1, deferred: 0, scheduled: 1 });
    await receiver.completeMessage(locked!);
    await receiver.close();
    await purger.close();
  });

  it('purges a dead-letter queue and a subscription', async () => {
    const topic = uniqueName('purge-topic');
    emulator.createTopic(topic);
    emulator.createSubscription(topic, 'all', { MaxDeliveryCount: 1 });
    await send(topic, 4);
    const receiver = client.createReceiver(topic, 'all', { maxAutoLockRenewalDurationInMs: 0 });
    const first = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    await receiver.deadLetterMessage(first[0]!, {
      deadLetterReason: 'test',
      deadLetterErrorDescription: 'purge test',
    });
    const dlq = client.createReceiver(topic, 'all', { subQueueType: 'deadLetter' });
    expect(await dlq.purgeMessages()).toBe(1);
    expect(emulator.inspect(`${topic}/Subscriptions/all`).deadLettered).toBe(0);
    expect(await receiver.purgeMessages()).toBe(3);
    expect(emulator.inspect(`${topic}/Subscriptions/all`).total).toBe(0);
    await receiver.close();
    await dlq.close();
  });

  it('a session receiver deletes only its own session', async () => {
    const queue = uniqueName('purge-session');
    emulator.createQueue(queue, { RequiresSession: true });
    await send(queue, 3, 0, 'a');
    await send(queue, 2, 10, 'b');
    const session = await client.acceptSession(queue, 'a');
    expect(await session.purgeMessages()).toBe(3);
    await session.close();
    expect(emulator.messages(queue).map((m) => m.group_id)).toEqual(['b', 'b']);
  });

  it('a receiver without a session leaves the messages of a session another receiver holds', async () => {
    const queue = uniqueName('purge-held-session');
    emulator.createQueue(queue, { RequiresSession: true });
    await send(queue, 2, 0, 'held');
    await send(queue, 2, 10, 'free');
    const holder = await client.acceptSession(queue, 'held');
    // The session lock covers all of the session's messages, received or not.
    const plain = client.createReceiver(queue);
    expect(await plain.purgeMessages()).toBe(2);
    expect(emulator.messages(queue).map((m) => m.group_id)).toEqual(['held', 'held']);
    const received = await holder.receiveMessages(2, { maxWaitTimeInMs: 5_000 });
    expect(received).toHaveLength(2);
    for (const message of received) await holder.completeMessage(message);
    await holder.close();
    await plain.close();
  });

  it('refuses a count above the per-request limit with a clear error', async () => {
    const queue = uniqueName('delete-limit');
    emulator.createQueue(queue);
    const receiver = client.createReceiver(queue);
    await expect(receiver.deleteMessages({ maxMessageCount: 4001 })).rejects.toThrow(
      /message-count must be an integer from 1 to 4000/,
    );
    await receiver.close();
  });
});
