import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEAD_LETTER_SESSION_VISIBILITY_SECONDS, openDeadLetters } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { type FaultyClient, faultyClient } from './sqsFaults.js';

// The dead-letter session's close() gives back what it read (visibility 0). Before the fix
// a give-back SQS refused was dropped without a word: the batch's Failed entries were never
// looked at (and a batch call that failed left the later batches untried), so those dead
// letters stayed hidden for the session's visibility timeout and the operator was not told.
// close() now tries every batch and then rejects, naming how many and when they come back.

describe('SQS dead-letter session close() (fauxqs)', () => {
  let emulator: Emulator;
  const cleanups: Array<() => void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
  });
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });
  afterAll(async () => {
    await emulator?.stop();
  });

  async function visible(url: string): Promise<number> {
    const out = await emulator.client.send(
      new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages'] }),
    );
    return Number(out.Attributes?.ApproximateNumberOfMessages);
  }

  /** A session on a DLQ holding `count` dead letters, all read (hidden), through a faulty client. */
  async function readSession(count: number): Promise<{
    faults: FaultyClient;
    dlqUrl: string;
    session: Awaited<ReturnType<typeof openDeadLetters>>;
    readAt: number;
  }> {
    const dlq = await emulator.createQueue('close-dlq');
    const queue = await emulator.createQueue('close');
    await send(
      emulator.client,
      dlq.url,
      Array.from({ length: count }, (_, i) => ({ id: `m-${i}`, body: `{"n":${i}}` })),
    );
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    const session = await openDeadLetters({
      name: 'close',
      broker: { type: 'sqs', queueUrl: queue.url, deadLetterQueueUrl: dlq.url, client: faults.client },
      store: {} as never,
      handler: async () => {},
    });
    const readAt = Date.now();
    expect(await session.read()).toHaveLength(count);
    expect(await visible(dlq.url)).toBe(0);
    return { faults, dlqUrl: dlq.url, session, readAt };
  }

  /** The time the error names as when the hidden letters come back, checked against the read. */
  function expectComeBackTime(message: string, readAt: number, closedAt: number) {
    const iso = /(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)/.exec(message)?.[1];
    expect(iso, message).toBeDefined();
    const back = Date.parse(iso!);
    expect(back).toBeGreaterThanOrEqual(readAt + DEAD_LETTER_SESSION_VISIBILITY_SECONDS * 1000 - 1000);
    expect(back).toBeLessThanOrEqual(closedAt + DEAD_LETTER_SESSION_VISIBILITY_SECONDS * 1000 + 1000);
  }

  it('entries SQS refuses in the batch answer are reported: how many, and when they come back', async () => {
    const { faults, dlqUrl, session, readAt } = await readSession(3);
    // One handle SQS no longer knows (as after its visibility ran out and another reader took it).
    faults.onCall('ChangeMessageVisibilityBatch', (input) => {
      const entries = input.Entries as Array<{ ReceiptHandle: string }>;
      entries[0]!.ReceiptHandle = 'not-a-receipt-handle';
    });
    const closing = session.close();
    await expect(closing).rejects.toThrow(/1 of 3 dead letters/);
    const message = String(await closing.catch((error: Error) => error.message));
    expect(message).toContain(dlqUrl);
    expectComeBackTime(message, readAt, Date.now());
    // The others were given back.
    expect(await visible(dlqUrl)).toBe(2);
  });

  it('a batch call that fails does not stop the others; close() names the letters left hidden', async () => {
    const { faults, dlqUrl, session, readAt } = await readSession(15);
    faults.failNext('ChangeMessageVisibilityBatch', 1, 'InternalError');
    const closing = session.close();
    await expect(closing).rejects.toThrow(/10 of 15 dead letters/);
    expectComeBackTime(String(await closing.catch((error: Error) => error.message)), readAt, Date.now());
    expect(faults.calls.get('ChangeMessageVisibilityBatch')).toBe(2);
    expect(await visible(dlqUrl)).toBe(5);
  });

  it('a close with nothing refused resolves and gives every letter back', async () => {
    const { dlqUrl, session } = await readSession(3);
    await session.close();
    expect(await visible(dlqUrl)).toBe(3);
  });
});
