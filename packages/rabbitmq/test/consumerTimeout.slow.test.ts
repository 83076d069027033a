import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { LeaseLostError, silentLogger } from '@oncely/core';
import { createRabbitMqConsumer } from '@oncely/rabbitmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestStore,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// SLOW and SERIAL (vitest.slow.config.ts, not in the default project): it lowers the
// server-wide consumer_timeout of the shared RabbitMQ to 5 s, which would break any
// other test with a handler longer than that, and restores it afterwards. RabbitMQ 3.10
// has no per-queue x-consumer-timeout (3.12+) and checks the timeout about once a minute,
// so the test takes 60-75 s.
//
// It shows what happens when the adapter is NOT told the server's value
// (consumerTimeoutMs unset) and a handler outlives it: the broker closes the channel
// with 406 PRECONDITION_FAILED, the handler's ctx.signal aborts, the adapter opens a new
// channel on the same connection, and the redelivery is applied exactly once.
const run = promisify(execFile);
const available = await servicesAvailable();

async function rabbitEval(expression: string): Promise<string> {
  const { stdout } = await run('rabbitmqctl', ['-q', 'eval', expression]);
  return stdout.trim();
}

describe.skipIf(!available)('consumer_timeout on the server (slow, serial)', () => {
  let raw: RawBroker;
  let db: TestStore;
  let previous: string;

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
    previous = await rabbitEval('application:get_env(rabbit, consumer_timeout).');
    await rabbitEval('application:set_env(rabbit, consumer_timeout, 5000).');
  });

  afterAll(async () => {
    // Restore exactly what was there: a value, or no setting at all.
    const match = /^\{ok,(\d+)\}$/.exec(previous ?? '');
    if (match) await rabbitEval(`application:set_env(rabbit, consumer_timeout, ${match[1]}).`);
    else if (previous === 'undefined') await rabbitEval('application:unset_env(rabbit, consumer_timeout).');
    await db?.cleanup();
    await raw?.close();
  });

  it('a handler outliving consumer_timeout loses its channel; the redelivery is applied once', async () => {
    const queue = unique('ctimeout');
    const aborted: unknown[] = [];
    let runs = 0;
    const consumer = createRabbitMqConsumer<{ id: string }>({
      name: `c-${queue}`,
      store: db.store,
      logger: silentLogger,
      concurrency: 2,
      handlerTimeoutMs: 200_000,
      broker: { url: RABBITMQ_URL, queue, reconnect: { initialMs: 50, maxMs: 1000 } },
      handler: async (message, ctx) => {
        runs++;
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        if (runs > 1) return;
        // The first run outlives the server's timeout and gives up when its channel goes.
        await new Promise((_resolve, reject) => {
          ctx.signal.addEventListener(
            'abort',
            () => {
              aborted.push(ctx.signal.reason);
              reject(ctx.signal.reason);
            },
            { once: true },
          );
        });
      },
    });
    const processed: string[] = [];
    consumer.on('processed', (e) => processed.push(e.messageId!));
    try {
      await consumer.start();
      await raw.publish(queue, [{ id: `${queue}-slow`, body: {} }]);
      await waitFor(() => processed.length === 1, 'the redelivery after the consumer timeout', 150_000);
      expect(aborted).toHaveLength(1);
      expect(aborted[0]).toBeInstanceOf(LeaseLostError);
      expect(runs).toBe(2);
      expect((await db.effects()).get(`${queue}-slow`)).toBe(1);
    } finally {
      await consumer.stop();
      await deleteTopology(raw, queue);
    }
  });
});
