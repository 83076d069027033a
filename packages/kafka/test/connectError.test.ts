import { createConsumer, isOncelyError, silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { closedPort } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type {} from '../src/index.js';

describe('start() on an unreachable broker', () => {
  const store = PostgresStore.embedded();
  beforeAll(() => store.migrate(), 60_000);
  afterAll(() => store.close());

  it('names the broker and the address', async () => {
    const port = await closedPort();
    const consumer = await createConsumer({
      name: 'unreachable',
      broker: { type: 'kafka', brokers: [`127.0.0.1:${port}`], topic: 'unreachable', retry: { retries: 0 } },
      store,
      logger: silentLogger,
      handler: async () => {},
    });
    const error = await consumer.start().catch((e: unknown) => e);
    expect(isOncelyError(error, 'BROKER_UNREACHABLE')).toBe(true);
    expect((error as Error).message).toBe(
      `cannot connect to Kafka at 127.0.0.1:${port}: Connection error: connect ECONNREFUSED 127.0.0.1:${port}`,
    );
    expect((error as Error).cause).toBeInstanceOf(Error);
  });
});
