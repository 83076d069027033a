import { Writable } from 'node:stream';
import { type Logger, stderrLogger, toLogger } from '@oncely/core';
import { createMemoryConsumer, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { ConsumerSpy } from '@oncely/testkit';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// A real pino logger passed straight in: pino takes (fields, message), Oncely calls
// (message, fields); the fields (and errors, under pino's `err`) must survive.

/** A pino logger writing JSON lines into memory. */
function capturedPino() {
  const lines: Array<Record<string, any>> = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, destination), lines };
}

let store: PostgresStore;
beforeAll(async () => {
  store = PostgresStore.embedded();
  await store.migrate();
});
afterAll(async () => {
  await store?.close();
});

describe('a pino logger', () => {
  it('keeps the fields and the error of each line Oncely writes', () => {
    const { logger, lines } = capturedPino();
    const log = toLogger(logger);
    log.warn('lease renewal failed; retrying', {
      consumer: 'payments',
      messageId: 'm-1',
      error: new Error('boom'),
    });
    log.info('bare message');
    toLogger(logger.child({ service: 'billing' })).error('child logger', { attempt: 3 });
    expect(lines[0]).toMatchObject({
      level: 40,
      msg: 'lease renewal failed; retrying',
      consumer: 'payments',
      messageId: 'm-1',
      err: { type: 'Error', message: 'boom', stack: expect.stringContaining('Error: boom') },
    });
    expect(lines[1]).toMatchObject({ level: 30, msg: 'bare message' });
    expect(lines[2]).toMatchObject({ level: 50, msg: 'child logger', service: 'billing', attempt: 3 });
  });

  it('leaves any other logger as it is', () => {
    const calls: unknown[][] = [];
    const custom: Logger = {
      debug: (...args) => calls.push(args),
      info: (...args) => calls.push(args),
      warn: (...args) => calls.push(args),
      error: (...args) => calls.push(args),
    };
    expect(toLogger(custom)).toBe(custom);
    expect(toLogger(stderrLogger)).toBe(stderrLogger);
    toLogger(custom).warn('message first', { a: 1 });
    expect(calls).toEqual([['message first', { a: 1 }]]);
  });

  it('is taken directly by a consumer: pipeline lines and ctx.log lines keep their fields', async () => {
    const { logger, lines } = capturedPino();
    const broker = new MemoryBroker();
    broker.createQueue('payments');
    const consumer = createMemoryConsumer({
      name: 'pino-payments',
      broker: { broker, queue: 'payments' },
      store,
      logger,
      maxAttempts: 1,
      handler: async (message, ctx) => {
        ctx.log.info('charging', { amount: 40 });
        if (message.id === 'bad') throw new Error('card declined');
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    try {
      await broker.send('payments', { id: 'good', body: {} });
      await broker.send('payments', { id: 'bad', body: {} });
      await spy.waitFor('processed');
      await spy.waitFor('deadLettered');
    } finally {
      await consumer.stop();
      await broker.close();
    }
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: 30,
        msg: 'charging',
        consumer: 'pino-payments',
        messageId: 'good',
        amount: 40,
      }),
    );
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: 40,
        msg: 'dead-lettering message',
        consumer: 'pino-payments',
        messageId: 'bad',
        reason: 'max-attempts',
        detail: expect.stringContaining('card declined'),
      }),
    );
  });
});
