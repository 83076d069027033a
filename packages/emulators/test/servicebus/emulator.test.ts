import {
  ServiceBusClient,
  type ServiceBusError,
  type ServiceBusReceivedMessage,
  type ServiceBusReceiver,
} from '@azure/service-bus';
import rhea, { type Connection, type ReceiverOptions } from 'rhea';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type ServiceBusEmulator, startServiceBusEmulator } from '../../dist/servicebus/index.js';
import { uniqueName, waitUntil, work } from './support.js';

// Every test drives the emulator with the real @azure/service-bus client (never a mock),
// through the flows of the official v7 samples, each on queues of its own.

let emulator: ServiceBusEmulator;
let client: ServiceBusClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({
    port: 0,
    config: {
      UserConfig: {
        Namespaces: [
          {
            Name: 'sbemulatorns',
            Queues: [{ Name: 'configured', Properties: { LockDuration: 'PT30S', MaxDeliveryCount: 4 } }],
            Topics: [
              {
                Name: 'configured-topic',
                Subscriptions: [
                  { Name: 'all' },
                  {
                    Name: 'red',
                    Rules: [
                      {
                        Name: 'red-only',
                        Properties: {
                          FilterType: 'Correlation',
                          CorrelationFilter: { Properties: { color: 'red' } },
                        },
                      },
                    ],
                  },
                ],
              },
            ],
          },
        ],
      },
    },
  });
  client = new ServiceBusClient(emulator.connectionString);
});

afterAll(async () => {
  await client?.close();
  await emulator?.stop();
});

/** A receiver without the SDK's auto lock renewal, so lock behaviour is the emulator's alone. */
function plainReceiver(entity: string, options: { receiveMode?: 'peekLock' | 'receiveAndDelete' } = {}) {
  return client.createReceiver(entity, { maxAutoLockRenewalDurationInMs: 0, ...options });
}

async function receiveAll(
  receiver: ServiceBusReceiver,
  count: number,
  waitMs = 2000,
): Promise<ServiceBusReceivedMessage[]> {
  const received: ServiceBusReceivedMessage[] = [];
  const deadline = Date.now() + waitMs;
  while (received.length < count && Date.now() < deadline) {
    received.push(...(await receiver.receiveMessages(count - received.length, { maxWaitTimeInMs: 300 })));
  }
  return received;
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as ServiceBusError).code ?? (error as Error).name;
  }
  return 'no error';
}

describe('sending and receiving', () => {
  it('sends single and batched messages; the receiver gets annotations, lock and delivery count', async () => {
    const queue = uniqueName('send');
    emulator.createQueue(queue, { LockDuration: 'PT30S' });
    const sender = client.createSender(queue);
    await sender.sendMessages({
      body: { n: 1 },
      messageId: 'one',
      applicationProperties: { kind: 'single' },
    });
    await sender.sendMessages([{ body: { n: 2 } }, { body: { n: 3 } }]);
    const batch = await sender.createMessageBatch();
    expect(batch.tryAddMessage({ body: { n: 4 }, subject: 'batched' })).toBe(true);
    expect(batch.tryAddMessage({ body: { n: 5 } })).toBe(true);
    await sender.sendMessages(batch);
    expect(emulator.inspect(queue).active).toBe(5);

    const receiver = plainReceiver(queue);
    const before = Date.now();
    const messages = await receiveAll(receiver, 5);
    expect(messages.map((m) => (m.body as { n: number }).n)).toEqual([1, 2, 3, 4, 5]);
    expect(messages.map((m) => m.sequenceNumber!.toNumber())).toEqual([1, 2, 3, 4, 5]);
    const [first] = messages;
    expect(first!.messageId).toBe('one');
    expect(first!.applicationProperties).toEqual({ kind: 'single' });
    expect(first!.deliveryCount).toBe(0);
    expect(first!.lockToken).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(first!.lockedUntilUtc!.getTime()).toBeGreaterThanOrEqual(before + 29_000);
    expect(first!.enqueuedTimeUtc!.getTime()).toBeLessThanOrEqual(Date.now());
    expect(messages[3]!.subject).toBe('batched');
    // The service assigns a MessageId when the producer sets none.
    expect(messages[1]!.messageId).toBeTruthy();
    for (const m of messages) await receiver.completeMessage(m);
    expect(emulator.inspect(queue).total).toBe(0);
    await receiver.close();
    await sender.close();
  });

  it('honours link credit: receiveMessages(2) locks two of five messages', async () => {
    const queue = uniqueName('credit');
    emulator.createQueue(queue);
    await client.createSender(queue).sendMessages([1, 2, 3, 4, 5].map((n) => ({ body: n })));
    const receiver = plainReceiver(queue);
    const got = await receiver.receiveMessages(2, { maxWaitTimeInMs: 1000 });
    expect(got).toHaveLength(2);
    expect(emulator.inspect(queue)).toMatchObject({ locked: 2, active: 3 });
    await receiver.close();
  });

  it('subscribe(): the streaming sample receives everything, at most maxConcurrentCalls at once', async () => {
    const queue = uniqueName('subscribe');
    emulator.createQueue(queue);
    await client.createSender(queue).sendMessages(Array.from({ length: 30 }, (_, n) => ({ body: n })));
    const receiver = client.createReceiver(queue);
    const seen: number[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    const subscription = receiver.subscribe(
      {
        processMessage: async (message) => {
          inFlight++;
          maxInFlight = Math.max(maxInFlight, inFlight);
          await work(5);
          seen.push(message.body as number);
          inFlight--;
        },
        processError: async () => {},
      },
      { maxConcurrentCalls: 3 },
    );
    await waitUntil(() => seen.length === 30, '30 messages processed');
    await subscription.close();
    expect(new Set(seen).size).toBe(30);
    expect(maxInFlight).toBeLessThanOrEqual(3);
    expect(maxInFlight).toBeGreaterThanOrEqual(2);
    await waitUntil(() => emulator.inspect(queue).total === 0, 'auto-completed messages gone');
    await receiver.close();
  });

  it('receiveAndDelete removes messages as they are handed out', async () => {
    const queue = uniqueName('rad');
    emulator.createQueue(queue);
    await client.createSender(queue).sendMessages([{ body: 'a' }, { body: 'b' }]);
    const receiver = plainReceiver(queue, { receiveMode: 'receiveAndDelete' });
    const got = await receiveAll(receiver, 2);
    expect(got.map((m) => m.body)).toEqual(['a', 'b']);
    expect(got[0]!.lockToken).toBeUndefined();
    expect(emulator.inspect(queue).total).toBe(0);
    await receiver.close();
  });

  it('peek returns messages without locking them, and nothing (204) on an empty queue', async () => {
    const queue = uniqueName('peek');
    emulator.createQueue(queue);
    const receiver = plainReceiver(queue);
    expect(await receiver.peekMessages(5)).toEqual([]);
    await client.createSender(queue).sendMessages([{ body: 'x' }, { body: 'y' }, { body: 'z' }]);
    const peeked = await receiver.peekMessages(2);
    expect(peeked.map((m) => m.body)).toEqual(['x', 'y']);
    expect((await receiver.peekMessages(5)).map((m) => m.body)).toEqual(['z']);
    expect(emulator.inspect(queue)).toMatchObject({ active: 3, locked: 0 });
    await receiver.close();
  });
});

describe('settlement and locks', () => {
  it('abandon raises the delivery count; MaxDeliveryCount dead-letters with MaxDeliveryCountExceeded', async () => {
    const queue = uniqueName('maxdc');
    emulator.createQueue(queue, { MaxDeliveryCount: 3 });
    await client.createSender(queue).sendMessages({ body: 'poison', messageId: 'p-1' });
    const receiver = plainReceiver(queue);
    const counts: number[] = [];
    for (let i = 0; i < 3; i++) {
      const [m] = await receiveAll(receiver, 1);
      counts.push(m!.deliveryCount!);
      await receiver.abandonMessage(m!);
    }
    expect(counts).toEqual([0, 1, 2]);
    expect(emulator.inspect(queue)).toMatchObject({ total: 0, deadLettered: 1 });
    const dlq = client.createReceiver(queue, {
      subQueueType: 'deadLetter',
      maxAutoLockRenewalDurationInMs: 0,
    });
    const [dead] = await receiveAll(dlq, 1);
    expect(dead!.messageId).toBe('p-1');
    expect(dead!.deadLetterReason).toBe('MaxDeliveryCountExceeded');
    expect(dead!.deadLetterSource).toBe(queue);
    await dlq.completeMessage(dead!);
    await receiver.close();
    await dlq.close();
  });

  it('dead-letter with reason and description; the DLQ sample reads it back', async () => {
    const queue = uniqueName('dlq');
    emulator.createQueue(queue);
    await client.createSender(queue).sendMessages({ body: { order: 7 }, messageId: 'order-7' });
    const receiver = plainReceiver(queue);
    const [m] = await receiveAll(receiver, 1);
    await receiver.deadLetterMessage(m!, {
      deadLetterReason: 'invalid-body',
      deadLetterErrorDescription: 'no amount',
    });
    const dlq = client.createReceiver(queue, {
      subQueueType: 'deadLetter',
      maxAutoLockRenewalDurationInMs: 0,
    });
    const [dead] = await receiveAll(dlq, 1);
    expect(dead!.body).toEqual({ order: 7 });
    expect(dead!.deadLetterReason).toBe('invalid-body');
    expect(dead!.deadLetterErrorDescription).toBe('no amount');
    await dlq.completeMessage(dead!);
    expect(emulator.inspect(`${queue}/$DeadLetterQueue`).total).toBe(0);
    await receiver.close();
    await dlq.close();
  });

  it('a lock that expires redelivers with a higher count; the stale settle and renew fail with MessageLockLost', async () => {
    const queue = uniqueName('expiry');
    emulator.createQueue(queue, { LockDuration: 'PT1S' });
    await client.createSender(queue).sendMessages({ body: 'slow', messageId: 'slow-1' });
    const first = plainReceiver(queue);
    const [held] = await receiveAll(first, 1);
    expect(held!.deliveryCount).toBe(0);
    // The second receiver renews its own lock: the two stale calls below must not race its
    // 1 s lock on a loaded machine (they set up a management link first).
    const second = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 60_000 });
    // The redelivery is what shows the lock expired (no sleep: the receive waits for it).
    const [again] = await receiveAll(second, 1, 5000);
    expect(again!.messageId).toBe('slow-1');
    expect(again!.deliveryCount).toBe(1);
    expect(await codeOf(first.completeMessage(held!))).toBe('MessageLockLost');
    expect(await codeOf(first.renewMessageLock(held!))).toBe('MessageLockLost');
    await second.completeMessage(again!);
    expect(emulator.inspect(queue).total).toBe(0);
    await first.close();
    await second.close();
  });

  it('renewMessageLock extends the lock, returning the new lockedUntilUtc', async () => {
    const queue = uniqueName('renew');
    // 5 s: the renew (management link set-up first) and the complete after it must each land
    // inside the lock on a loaded machine.
    emulator.createQueue(queue, { LockDuration: 'PT5S' });
    await client.createSender(queue).sendMessages({ body: 'r' });
    const receiver = plainReceiver(queue);
    const [m] = await receiveAll(receiver, 1);
    // A lower bound from before the call (the emulator renews at its now, which is later):
    // 'more than now + 800 ms after the answer' failed when the call took > 200 ms.
    const first = m!.lockedUntilUtc!.getTime();
    const before = Date.now();
    const until = await receiver.renewMessageLock(m!);
    expect(until.getTime()).toBeGreaterThanOrEqual(before + 5000);
    // Later than the first lock (the SDK sets the message's lockedUntilUtc to the new one).
    expect(until.getTime()).toBeGreaterThan(first);
    await receiver.completeMessage(m!);
    await receiver.close();
  });

  it('lock expiry mid-handler without renewal: a competitor gets the redelivery, the late complete fails, one effect', async () => {
    const queue = uniqueName('midhandler');
    emulator.createQueue(queue, { LockDuration: 'PT1S' });
    await client.createSender(queue).sendMessages({ body: 'job', messageId: 'job-1' });
    const effects = new Map<string, number>();
    const outcomes: string[] = [];
    const deliveries: number[] = [];
    const handler =
      (label: string, workMs: number) =>
      async (message: ServiceBusReceivedMessage, r: ServiceBusReceiver) => {
        deliveries.push(message.deliveryCount!);
        await work(workMs);
        // An idempotent effect: applied once per message ID.
        if (!effects.has(message.messageId as string)) effects.set(message.messageId as string, 1);
        outcomes.push(`${label}:${await codeOf(r.completeMessage(message))}`);
      };
    const slow = plainReceiver(queue);
    const [m] = await receiveAll(slow, 1);
    const slowRun = handler('slow', 1500)(m!, slow);
    // The competitor renews its lock: its complete must not race its own 1 s lock.
    const fast = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 60_000 });
    const [redelivered] = await receiveAll(fast, 1, 5000);
    await handler('fast', 0)(redelivered!, fast);
    await slowRun;
    expect(deliveries).toEqual([0, 1]);
    expect(outcomes.sort()).toEqual(['fast:no error', 'slow:MessageLockLost']);
    expect([...effects.values()]).toEqual([1]);
    expect(emulator.inspect(queue).total).toBe(0);
    await slow.close();
    await fast.close();
  });

  it('lock expiry mid-handler with renewal: the SDK renewer keeps the lock, no redelivery', async () => {
    const queue = uniqueName('renewed');
    // 3 s: the SDK renews at half the lock, so a stall under 1.5 s keeps it on a loaded machine.
    emulator.createQueue(queue, { LockDuration: 'PT3S' });
    await client.createSender(queue).sendMessages({ body: 'job', messageId: 'job-2' });
    const renewing = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 10_000 });
    const competitor = plainReceiver(queue);
    const [m] = await receiveAll(renewing, 1);
    // 2.5 lock durations of work while a competitor keeps asking.
    const [stolen] = await Promise.all([
      competitor.receiveMessages(1, { maxWaitTimeInMs: 7500 }),
      work(7500),
    ]);
    expect(stolen).toEqual([]);
    await renewing.completeMessage(m!);
    expect(emulator.inspect(queue).total).toBe(0);
    await renewing.close();
    await competitor.close();
  });

  it('deferral: defer, then receiveDeferredMessages by sequence number and complete', async () => {
    const queue = uniqueName('defer');
    emulator.createQueue(queue);
    await client.createSender(queue).sendMessages([{ body: 'later' }, { body: 'now' }]);
    const receiver = plainReceiver(queue);
    const [later, now] = await receiveAll(receiver, 2);
    await receiver.deferMessage(later!);
    await receiver.completeMessage(now!);
    expect(emulator.inspect(queue)).toMatchObject({ deferred: 1, active: 0 });
    expect(await receiver.receiveMessages(1, { maxWaitTimeInMs: 200 })).toEqual([]);
    const [deferred] = await receiver.receiveDeferredMessages(later!.sequenceNumber!);
    expect(deferred!.body).toBe('later');
    expect(deferred!.state).toBe('deferred');
    await receiver.completeMessage(deferred!);
    expect(emulator.inspect(queue).total).toBe(0);
    await receiver.close();
  });

  it('scheduled messages appear at their time; a cancelled one never does', async () => {
    const queue = uniqueName('schedule');
    emulator.createQueue(queue);
    const sender = client.createSender(queue);
    // Far enough ahead that the schedules, the cancel and the peek (a management link first)
    // finish before it on a loaded machine.
    const at = new Date(Date.now() + 5000);
    const [keep] = await sender.scheduleMessages({ body: 'keep' }, at);
    const [drop] = await sender.scheduleMessages({ body: 'drop' }, at);
    expect(keep!.toNumber()).toBeLessThan(drop!.toNumber());
    await sender.cancelScheduledMessages(drop!);
    const receiver = plainReceiver(queue);
    const peeked = await receiver.peekMessages(5);
    expect(peeked.map((m) => [m.body, m.state])).toEqual([['keep', 'scheduled']]);
    const [m] = await receiveAll(receiver, 1, 20_000);
    expect(m!.body).toBe('keep');
    expect(Date.now()).toBeGreaterThanOrEqual(at.getTime());
    await receiver.completeMessage(m!);
    expect(emulator.inspect(queue).total).toBe(0);
    await receiver.close();
  });

  it('timeToLive: expired messages go to the DLQ when DeadLetteringOnMessageExpiration is set, else vanish', async () => {
    const toDlq = uniqueName('ttl-dlq');
    const dropped = uniqueName('ttl-drop');
    emulator.createQueue(toDlq, { DeadLetteringOnMessageExpiration: true });
    emulator.createQueue(dropped, { DefaultMessageTimeToLive: 'PT0.2S' });
    await client.createSender(toDlq).sendMessages({ body: 'stale', timeToLive: 200 });
    await client.createSender(dropped).sendMessages({ body: 'gone' });
    await waitUntil(() => emulator.inspect(toDlq).deadLettered === 1, 'the expired message in the DLQ');
    await waitUntil(() => emulator.inspect(dropped).total === 0, 'the expired message dropped');
    expect(emulator.inspect(dropped).deadLettered).toBe(0);
    const dlq = client.createReceiver(toDlq, { subQueueType: 'deadLetter' });
    const [dead] = await receiveAll(dlq, 1);
    expect(dead!.deadLetterReason).toBe('TTLExpiredException');
    await dlq.completeMessage(dead!);
    await dlq.close();
  });

  // Catches: a scheduled message keeping its fired activation timer as if it were the
  // expiry timer, so its time to live never ran out until something touched it.
  it('timeToLive: a scheduled message expires on its own once it is visible', async () => {
    const queue = uniqueName('ttl-scheduled');
    emulator.createQueue(queue, { DeadLetteringOnMessageExpiration: true });
    await client
      .createSender(queue)
      .scheduleMessages({ body: 'late and stale', timeToLive: 300 }, new Date(Date.now() + 5000));
    expect(emulator.inspect(queue).scheduled).toBe(1);
    await waitUntil(
      () => emulator.inspect(queue).deadLettered === 1,
      'the expired scheduled message in the DLQ',
    );
    expect(emulator.inspect(queue).total).toBe(0);
  });

  it('duplicate detection: a MessageId repeated inside the window is accepted and dropped', async () => {
    const queue = uniqueName('dedup');
    emulator.createQueue(queue, {
      RequiresDuplicateDetection: true,
      DuplicateDetectionHistoryTimeWindow: 'PT1M',
    });
    const sender = client.createSender(queue);
    await sender.sendMessages({ body: 1, messageId: 'same' });
    await sender.sendMessages({ body: 2, messageId: 'same' });
    await sender.sendMessages([
      { body: 3, messageId: 'same' },
      { body: 4, messageId: 'other' },
    ]);
    expect(emulator.messages(queue).map((m) => m.message_id)).toEqual(['same', 'other']);
  });
});

describe('sessions', () => {
  it('acceptSession receives one session in order; session state round-trips; a second accept is refused', async () => {
    const queue = uniqueName('sessions');
    emulator.createQueue(queue, { RequiresSession: true });
    const sender = client.createSender(queue);
    await sender.sendMessages([
      { body: 'a1', sessionId: 'a' },
      { body: 'b1', sessionId: 'b' },
      { body: 'a2', sessionId: 'a' },
    ]);
    expect(await codeOf(sender.sendMessages({ body: 'no session' }))).not.toBe('no error');
    const a = await client.acceptSession(queue, 'a', { maxAutoLockRenewalDurationInMs: 0 });
    expect(a.sessionLockedUntilUtc!.getTime()).toBeGreaterThan(Date.now());
    const got = await receiveAll(a, 2);
    expect(got.map((m) => m.body)).toEqual(['a1', 'a2']);
    await a.setSessionState({ step: 2 });
    expect(await a.getSessionState()).toEqual({ step: 2 });
    const renewed = await a.renewSessionLock();
    expect(renewed.getTime()).toBeGreaterThan(Date.now());
    expect(await codeOf(client.acceptSession(queue, 'a'))).toBe('SessionCannotBeLocked');
    for (const m of got) await a.completeMessage(m);
    const next = await client.acceptNextSession(queue, { maxAutoLockRenewalDurationInMs: 0 });
    expect(next.sessionId).toBe('b');
    const [b1] = await receiveAll(next, 1);
    await next.completeMessage(b1!);
    await a.close();
    await next.close();
  });

  it('accept-next-session waits for a session to get messages', async () => {
    const queue = uniqueName('next-wait');
    emulator.createQueue(queue, { RequiresSession: true });
    const waiting = client.acceptNextSession(queue, { maxAutoLockRenewalDurationInMs: 0 });
    await waitUntil(() => emulator.inspect(queue).waitingForSession === 1, 'the accept to wait');
    await client.createSender(queue).sendMessages({ body: 'late', sessionId: 'late' });
    const receiver = await waiting;
    expect(receiver.sessionId).toBe('late');
    expect(emulator.inspect(queue).waitingForSession).toBe(0);
    await receiver.close();
  });

  it('when the session lock expires the receiver fails with SessionLockLost and the messages return with a higher count', async () => {
    const queue = uniqueName('session-expiry');
    emulator.createQueue(queue, { RequiresSession: true, LockDuration: 'PT1S' });
    await client.createSender(queue).sendMessages({ body: 's1', sessionId: 's' });
    const first = await client.acceptSession(queue, 's', { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveAll(first, 1);
    expect(m!.deliveryCount).toBe(0);
    // The next accept of the session succeeds only once the first lock is gone.
    const second = await waitUntil(
      // This one renews its session lock: the calls below must not race its 1 s lock.
      () =>
        client.acceptSession(queue, 's', { maxAutoLockRenewalDurationInMs: 60_000 }).catch(() => undefined),
      'the session to be free again',
    );
    expect(await codeOf(first.completeMessage(m!))).toBe('SessionLockLost');
    const [again] = await receiveAll(second, 1);
    expect(again!.deliveryCount).toBe(1);
    await second.completeMessage(again!);
    await first.close().catch(() => {});
    await second.close();
  });

  it('expireSessionLock ends a held session lock now: renewal and settlement fail with SessionLockLost, the messages return with a higher count', async () => {
    const queue = uniqueName('session-expire-now');
    emulator.createQueue(queue, { RequiresSession: true, LockDuration: 'PT5M' });
    await client.createSender(queue).sendMessages({ body: 's1', sessionId: 's' });
    const first = await client.acceptSession(queue, 's', { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveAll(first, 1);
    expect(emulator.expireSessionLock(queue, 'nobody-holds-this')).toBe(false);
    expect(emulator.expireSessionLock(queue, 's')).toBe(true);
    expect(await codeOf(first.renewSessionLock())).toBe('SessionLockLost');
    expect(await codeOf(first.completeMessage(m!))).toBe('SessionLockLost');
    // Free at once, not after the 5-minute lock.
    const second = await client.acceptSession(queue, 's', { maxAutoLockRenewalDurationInMs: 0 });
    const [again] = await receiveAll(second, 1);
    expect(again!.deliveryCount).toBe(1);
    await second.completeMessage(again!);
    await first.close().catch(() => {});
    await second.close();
  });

  // A missed wake-up leaves accept-next-session waiting out its whole server wait for a
  // session that is free. Each of these waits on a client whose accept-next-session asks
  // the emulator to wait 5 s: a missed wake-up shows as ServiceTimeout, not as a session.

  it('a session lock runs out even when its timer fires before the clock reaches the end; a waiting accept-next-session gets the session', async () => {
    const queue = uniqueName('session-expiry-early');
    emulator.createQueue(queue, { RequiresSession: true, LockDuration: 'PT1S' });
    await client.createSender(queue).sendMessages({ body: 's1', sessionId: 's' });
    const holder = await client.acceptSession(queue, 's', { maxAutoLockRenewalDurationInMs: 0 });
    // Timers run on the monotonic clock (from the event loop's cached time), Date.now()
    // on the wall clock: a timer can fire before Date.now() reaches the deadline it was
    // set for. A wall clock running 300 ms behind makes that happen every time.
    const wallClock = Date.now.bind(Date);
    const clockBehind = vi.spyOn(Date, 'now').mockImplementation(() => wallClock() - 300);
    const waiting = shortWaitClient();
    try {
      const next = await waiting.acceptNextSession(queue, { maxAutoLockRenewalDurationInMs: 0 });
      expect(next.sessionId).toBe('s');
      await next.close();
    } finally {
      clockBehind.mockRestore();
      await waiting.close();
      await holder.close().catch(() => {});
    }
  });

  it('an AMQP session ended without detaching its links frees their sessions and drops their accept-next-session waits', async () => {
    const queue = uniqueName('next-session-ended');
    // A lock far longer than the wait: only the end of the AMQP session can free anything.
    emulator.createQueue(queue, { RequiresSession: true, LockDuration: 'PT5M' });
    await client.createSender(queue).sendMessages({ body: 'h1', sessionId: 'held' });
    // An AMQP client that ends its session with two links still attached (the spec
    // detaches them with it): one holds the session 'held', one waits for the next session.
    const connection = await rawConnection();
    const session = connection.create_session();
    session.begin();
    const bound = session.attach_receiver(sessionSource(queue, 'held'));
    await new Promise((resolve) => bound.once('receiver_open', resolve));
    session.attach_receiver(sessionSource(queue, null));
    await waitUntil(() => emulator.inspect(queue).waitingForSession === 1, 'the raw accept to wait');
    await new Promise<void>((resolve) => {
      session.once('session_close', () => resolve());
      session.close();
    });
    expect(emulator.inspect(queue).waitingForSession).toBe(0);
    await client.createSender(queue).sendMessages({ body: 'l1', sessionId: 'late' });
    const waiting = shortWaitClient();
    try {
      const first = await waiting.acceptNextSession(queue, { maxAutoLockRenewalDurationInMs: 0 });
      const second = await waiting.acceptNextSession(queue, { maxAutoLockRenewalDurationInMs: 0 });
      expect([first.sessionId, second.sessionId].sort()).toEqual(['held', 'late']);
      await first.close();
      await second.close();
    } finally {
      await waiting.close();
      connection.close();
    }
  });
});

describe('link flow control', () => {
  // Catches: a drain that arrives after the credit was used up left unanswered. rhea's
  // sender sets drain on its reply only while credit is left; AMQP 1.0 (2.6.7) wants the
  // drain echoed whatever the credit. The SDK drains whenever a receive's wait ends first
  // (a busy event loop, its messages already on the wire), waits 200 ms for the echo, then
  // closes the link, stranding the settlements of what it received on it.
  it('answers a drain with drain set even when every credit was already used', async () => {
    const queue = uniqueName('drain');
    emulator.createQueue(queue);
    await client.createSender(queue).sendMessages([1, 2, 3].map((n) => ({ body: n })));
    const connection = await rawConnection();
    try {
      const receiver = connection.open_receiver({
        source: { address: queue },
        autoaccept: false,
        credit_window: 0,
      });
      await new Promise((resolve) => receiver.once('receiver_open', resolve));
      let received = 0;
      const all = new Promise<void>((resolve) =>
        receiver.on('message', () => {
          if (++received === 3) resolve();
        }),
      );
      receiver.add_credit(3);
      await all;
      // The credit is used up: the drain must still be echoed, with nothing left to send.
      const drained = new Promise<number>((resolve) =>
        // rhea keeps the link's credit on the receiver, outside its typings.
        receiver.once('receiver_drained', () => resolve((receiver as unknown as { credit: number }).credit)),
      );
      receiver.drain_credit();
      // Unanswered, this waits out the test's timeout.
      expect(await drained).toBe(0);
      expect(received).toBe(3);
    } finally {
      connection.close();
    }
  });

  // Catches: a receiver stalling for good after 2048 messages. In peek-lock the client
  // settles (rcv-settle-mode second) on the emulator's settled disposition and sends
  // nothing more, so rhea's outgoing buffer, which drops a delivery only once the peer
  // has settled it too, kept every delivery and stopped sending at its 2048 slots.
  it('keeps delivering on one receiver past 2048 settled messages', async () => {
    const queue = uniqueName('long-receiver');
    emulator.createQueue(queue);
    const total = 2100;
    const sender = client.createSender(queue);
    for (let from = 0; from < total; from += 700) {
      await sender.sendMessages(Array.from({ length: 700 }, (_, n) => ({ body: from + n })));
    }
    await sender.close();
    const receiver = plainReceiver(queue);
    let completed = 0;
    try {
      for (let empty = 0; completed < total && empty < 3; ) {
        const messages = await receiver.receiveMessages(100, { maxWaitTimeInMs: 500 });
        if (messages.length === 0) empty++;
        for (const message of messages) await receiver.completeMessage(message);
        completed += messages.length;
      }
    } finally {
      await receiver.close();
    }
    expect(completed).toBe(total);
  }, 60_000);
});

/** A client whose accept-next-session asks the emulator to wait about 5 s (not 60 s). */
function shortWaitClient(): ServiceBusClient {
  return new ServiceBusClient(emulator.connectionString, { retryOptions: { timeoutInMs: 5000 } });
}

/** A plain rhea connection to the emulator, for frames the SDK never sends. */
async function rawConnection(): Promise<Connection> {
  const connection = rhea
    .create_container()
    .connect({ host: '127.0.0.1', port: emulator.port, reconnect: false });
  await new Promise((resolve) => connection.once('connection_open', resolve));
  return connection;
}

/** Receiver options of a session link: `sessionId` null asks for the next free session. */
function sessionSource(queue: string, sessionId: string | null): ReceiverOptions {
  return {
    source: { address: queue, filter: { 'com.microsoft:session-filter': sessionId } },
    autoaccept: false,
    credit_window: 0,
  };
}

describe('topics', () => {
  it('subscriptions each get a copy; a correlation filter selects by application property', async () => {
    const sender = client.createSender('configured-topic');
    await sender.sendMessages([
      { body: 'r', applicationProperties: { color: 'red' } },
      { body: 'b', applicationProperties: { color: 'blue' } },
    ]);
    const all = client.createReceiver('configured-topic', 'all', { maxAutoLockRenewalDurationInMs: 0 });
    const red = client.createReceiver('configured-topic', 'red', { maxAutoLockRenewalDurationInMs: 0 });
    expect((await receiveAll(all, 2)).map((m) => m.body)).toEqual(['r', 'b']);
    const reds = await receiveAll(red, 1);
    expect(reds.map((m) => m.body)).toEqual(['r']);
    expect(await red.receiveMessages(1, { maxWaitTimeInMs: 200 })).toEqual([]);
    await red.deadLetterMessage(reds[0]!, {
      deadLetterReason: 'test',
      deadLetterErrorDescription: 'by the test',
    });
    const dlq = client.createReceiver('configured-topic', 'red', { subQueueType: 'deadLetter' });
    expect((await receiveAll(dlq, 1)).map((m) => m.deadLetterReason)).toEqual(['test']);
    await all.close();
    await red.close();
    await dlq.close();
  });

  it('entities from Config.json carry their Properties', () => {
    expect(emulator.settingsOf('configured')).toMatchObject({ lockDurationMs: 30_000, maxDeliveryCount: 4 });
    expect(emulator.settingsOf('configured-topic/Subscriptions/red')).toMatchObject({ maxDeliveryCount: 10 });
  });
});

describe('test hooks', () => {
  it('server-side disconnect: a subscribed receiver reconnects and keeps receiving', async () => {
    const queue = uniqueName('disconnect');
    emulator.createQueue(queue, { LockDuration: 'PT2S' });
    const own = new ServiceBusClient(emulator.connectionString, {
      retryOptions: { maxRetries: 10, retryDelayInMs: 100, maxRetryDelayInMs: 500, timeoutInMs: 3000 },
    });
    const sender = own.createSender(queue);
    const receiver = own.createReceiver(queue);
    const seen = new Set<number>();
    const subscription = receiver.subscribe({
      processMessage: async (m) => {
        seen.add(m.body as number);
      },
      processError: async () => {},
    });
    await sender.sendMessages([1, 2, 3].map((n) => ({ body: n })));
    await waitUntil(() => seen.size === 3, 'the first three');
    expect(emulator.disconnect()).toBeGreaterThan(0);
    await waitUntil(
      () =>
        sender.sendMessages([4, 5, 6].map((n) => ({ body: n }))).then(
          () => true,
          () => false,
        ),
      'a send after the disconnect',
    );
    await waitUntil(() => seen.size === 6, 'the three after the disconnect', 20_000);
    await subscription.close();
    await own.close();
  });

  it('restart keeps entities and messages (a durable namespace)', async () => {
    const queue = uniqueName('restart');
    emulator.createQueue(queue);
    const own = new ServiceBusClient(emulator.connectionString, {
      retryOptions: { maxRetries: 10, retryDelayInMs: 100, maxRetryDelayInMs: 500, timeoutInMs: 3000 },
    });
    await own.createSender(queue).sendMessages({ body: 'kept' });
    const port = emulator.port;
    await emulator.restart({ downMs: 200 });
    expect(emulator.port).toBe(port);
    const receiver = own.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
    const [m] = await receiveAll(receiver, 1, 10_000);
    expect(m!.body).toBe('kept');
    await receiver.completeMessage(m!);
    await own.close();
  });

  it('expireLocks hands a locked message out again at once', async () => {
    const queue = uniqueName('force');
    emulator.createQueue(queue, { LockDuration: 'PT5M' });
    await client.createSender(queue).sendMessages({ body: 'x', messageId: 'forced' });
    const receiver = plainReceiver(queue);
    const [m] = await receiveAll(receiver, 1);
    expect(emulator.expireLocks(queue, (msg) => msg.message_id === 'forced')).toBe(1);
    const [again] = await receiveAll(receiver, 1);
    expect(again!.deliveryCount).toBe(1);
    expect(await codeOf(receiver.completeMessage(m!))).toBe('MessageLockLost');
    await receiver.completeMessage(again!);
    await receiver.close();
  });
});
