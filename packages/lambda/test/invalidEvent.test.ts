import { PostgresStore } from '@oncely/postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidEventError, kafkaHandler, sqsHandler } from '../src/index.js';

// A function wired to the wrong trigger (an SQS event to the Kafka handler, or the other
// way round) is refused with LAMBDA_EVENT_INVALID before any record runs: the invocation
// fails, the mapping retries it and the error says what was expected, rather than the
// batch being read as empty and "succeeding".
const store = new PostgresStore({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
});
afterAll(() => store.close());

const sqsEvent = { Records: [{ messageId: 'm-1', body: '{}', attributes: {}, messageAttributes: {} }] };
const kafkaEvent = { eventSource: 'aws:kafka', records: { 'orders-0': [] } };

describe('InvalidEventError', () => {
  it.each([
    ['an SQS event', sqsEvent],
    ['no records', { eventSource: 'aws:kafka' }],
    ['no event', undefined],
  ])('the Kafka handler refuses %s', async (_what, event) => {
    let ran = 0;
    const fn = kafkaHandler({ name: 'wrong-trigger', store, handler: async () => void ran++ });
    const outcome = fn(event as never);
    await expect(outcome).rejects.toBeInstanceOf(InvalidEventError);
    await expect(outcome).rejects.toMatchObject({
      code: 'LAMBDA_EVENT_INVALID',
      message: expect.stringMatching(/kafkaHandler expects an MSK or self-managed Kafka event/),
    });
    expect(ran).toBe(0);
  });

  it.each([
    ['a Kafka event', kafkaEvent],
    ['no event', undefined],
  ])('the SQS handler refuses %s', async (_what, event) => {
    let ran = 0;
    const fn = sqsHandler({ name: 'wrong-trigger', store, handler: async () => void ran++ });
    const outcome = fn(event as never, { getRemainingTimeInMillis: () => 30_000 });
    await expect(outcome).rejects.toBeInstanceOf(InvalidEventError);
    await expect(outcome).rejects.toMatchObject({
      code: 'LAMBDA_EVENT_INVALID',
      message: expect.stringMatching(/sqsHandler expects an SQS event/),
    });
    expect(ran).toBe(0);
  });
});
