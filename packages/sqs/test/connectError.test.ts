import { createConsumer, isOncelyError, silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { closedPort } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type {} from '../src/index.js';

describe('start() on an unreachable broker', () => {
  const store = PostgresStore.embedded();
  beforeAll(() => store.migrate(), 60_000);
  afterAll(() => store.close());

  it('names the broker and the address, without the secret', async () => {
    const port = await closedPort();
    const consumer = await createConsumer({
      name: 'unreachable',
      broker: {
        type: 'sqs',
        queueUrl: `http://127.0.0.1:${port}/000000000000/unreachable`,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 's3cret' },
      },
      store,
      logger: silentLogger,
      handler: async () => {},
    });
    const error = await consumer.start().catch((e: unknown) => e);
    expect(isOncelyError(error, 'BROKER_UNREACHABLE')).toBe(true);
    expect((error as Error).message).toBe(
      `cannot connect to SQS at http://127.0.0.1:${port}/000000000000/unreachable: connect ECONNREFUSED 127.0.0.1:${port}`,
    );
    expect((error as Error).message).not.toContain('s3cret');
    expect((error as Error).cause).toBeInstanceOf(Error);
  });
});
