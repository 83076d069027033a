import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { silentLogger } from '@oncely/core';
import { waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, heldPolls, pollOutcomes, send, startEmulator } from './fauxqs.js';
import { faultyClient } from './sqsFaults.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// stop() during a long poll must not strand messages (issue 11, SQS 4). A long poll that
// the client abandons keeps waiting on the server (fauxqs, and SQS, do not notice the
// closed connection): a message sent meanwhile is handed to the dead request and stays
// invisible for a whole visibility timeout. The adapter lets the poll answer and
// releases (visibility 0) what it returns.

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS stop() during a long poll (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('stop');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it('a message sent while stop() ends the poll is not stranded for a visibility timeout', async () => {
    const queue = await emulator.createQueue('stop-strand', { VisibilityTimeout: '60' });
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    let handled = 0;
    const consumer = createSqsConsumer({
      name: 'stop-strand',
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 3 },
      store: db.store,
      logger: silentLogger,
      handler: async () => {
        handled++;
      },
    });
    cleanups.push(() => consumer.stop());
    const held = heldPolls(emulator);
    cleanups.push(() => held.close());
    await consumer.start();
    // The poll read in full by fauxqs, which holds it (the client's own count comes before
    // the call is on the wire: a stop() then would test nothing).
    await waitFor(() => held.count() >= 1, { description: 'a long poll held by fauxqs' });
    const stopped = consumer.stop();
    await send(emulator.client, queue.url, [{ id: 'strand-1', body: '{}' }]);
    await stopped;
    expect(handled).toBe(0);
    // Visible again at once (not after 60 s): a receive outlasting the poll gets it.
    const out = await emulator.client.send(
      new ReceiveMessageCommand({ QueueUrl: queue.url, WaitTimeSeconds: 5, MessageAttributeNames: ['All'] }),
    );
    expect(out.Messages?.map((m) => m.MessageAttributes?.['message-id']?.StringValue)).toEqual(['strand-1']);
  }, 30_000);

  it('abortPollOnStop: true ends a 20 s long poll at once', async () => {
    const queue = await emulator.createQueue('stop-abort', { VisibilityTimeout: '5' });
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    const consumer = createSqsConsumer({
      name: 'stop-abort',
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 20, abortPollOnStop: true },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    const held = heldPolls(emulator);
    cleanups.push(() => held.close());
    const polls = pollOutcomes(faults.client, queue.url);
    await consumer.start();
    await waitFor(() => held.count() >= 1, { description: 'a long poll held by fauxqs' });
    await consumer.stop();
    // The held poll ended by the client's abort before stop() resolved, not by fauxqs'
    // answer after 20 s (a stop() that waits it out sees it 'answered'): no clock to beat,
    // however slow the machine.
    expect(polls).not.toContain('answered');
    expect(polls.at(-1)).toBe('AbortError');
  });
});
