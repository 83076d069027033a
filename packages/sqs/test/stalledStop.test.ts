import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { silentLogger } from '@oncely/core';
import { TcpProxy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEAD_LETTER_CLOSE_TIMEOUT_MS } from '../src/deadLetters.js';
import { createSqsConsumer, openDeadLetters } from '../src/index.js';
import { CREDENTIALS, type Emulator, heldPolls, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// A stop or a close must end when the connection to SQS goes silent (a black-holing
// network: no error, no close, no answer). The AWS SDK's `requestTimeout` only logs a
// warning unless `throwOnRequestTimeout` is set, and its socket timeout is 15 minutes (then
// it retries): a consumer's stop() waiting for its long poll, and `oncely dlq`'s close()
// giving the letters back, hung that long.
const hasPostgres = await postgresAvailable();

/** Resolves with what `promise` gave, or with 'hung' after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), ms);
  });
  return Promise.race([promise, hung]).finally(() => clearTimeout(timer));
}

describe.skipIf(!hasPostgres)('SQS stop and close with a stalled connection (fauxqs through a proxy)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let proxy: TcpProxy;
  let endpoint: string;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('stall');
    proxy = new TcpProxy({ host: '127.0.0.1', port: emulator.server.port });
    endpoint = `http://127.0.0.1:${await proxy.start()}`;
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    proxy.unstall();
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await proxy?.close();
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it("a consumer's stop() whose long poll never answers settles", async () => {
    const queue = await emulator.createQueue('stall-stop');
    const consumer = createSqsConsumer({
      name: 'stall-stop',
      broker: {
        queueUrl: queue.url,
        endpoint,
        region: 'us-east-1',
        credentials: CREDENTIALS,
        waitTimeSeconds: 1,
      },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    const held = heldPolls(emulator);
    cleanups.push(() => held.close());
    await consumer.start();
    await waitFor(() => held.count() >= 1, { description: 'a long poll held by fauxqs' });
    // Its answer (and any later request) is swallowed: the poll is on a silent connection.
    proxy.stall();
    expect(await within(consumer.stop(), 60_000)).toBeUndefined();
  }, 90_000);

  it("a dead-letter session's close() on a silent connection settles and leaves the letters in the DLQ", async () => {
    const dlq = await emulator.createQueue('stall-dlq');
    const source = await emulator.createQueue('stall-src');
    await send(
      emulator.client,
      dlq.url,
      Array.from({ length: 3 }, (_, i) => ({ id: `stall-${i}`, body: '{}' })),
    );
    const session = await openDeadLetters({
      name: 'stall-dlq',
      broker: {
        type: 'sqs',
        queueUrl: source.url,
        deadLetterQueueUrl: dlq.url,
        endpoint,
        region: 'us-east-1',
        credentials: CREDENTIALS,
      },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    expect(await session.read()).toHaveLength(3);
    proxy.stall();
    const closing = session.close().then(
      () => 'closed',
      (error: Error) => error.message,
    );
    // It cannot give the letters back: it says so, within its bound (DEAD_LETTER_CLOSE_TIMEOUT_MS;
    // 60 s here only tells a bound from a hang).
    expect(await within(closing, 60_000)).toMatch(
      new RegExp(
        `could not give back 3 of 3 dead letters .*no answer within ${DEAD_LETTER_CLOSE_TIMEOUT_MS} ms.*120 s visibility timeout`,
      ),
    );
    // Nothing lost: still in the DLQ, hidden until the session's visibility lapses.
    const out = await emulator.client.send(
      new GetQueueAttributesCommand({
        QueueUrl: dlq.url,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    const { ApproximateNumberOfMessages: visible, ApproximateNumberOfMessagesNotVisible: hidden } =
      out.Attributes ?? {};
    expect(Number(visible) + Number(hidden)).toBe(3);
  }, 90_000);
});
