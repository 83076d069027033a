import type { PubSub } from '@google-cloud/pubsub';
import { isOncelyError, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { createAdapter, publishWithId } from '@oncely/pubsub';
import { waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFixture } from './fixture.js';
import { adminClient, postgresAvailable, startEmulator } from './support.js';

// broker.ackDeadlineSeconds is also the stream's ack deadline (streamAckDeadlineSeconds),
// which the service accepts from 10 to 600 s only: a lower value was accepted at
// construction and the service then refused every stream (issue 34, defect 7). The
// emulator runs with the service's 10 s minimum here.

const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

const refusal = (ackDeadlineSeconds: unknown) => {
  try {
    createAdapter(
      { type: 'pubsub', subscription: 'payments', ackDeadlineSeconds },
      { consumerName: 'c', log: silentLogger },
    );
    return undefined;
  } catch (error) {
    expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
    return error as Error & { field?: string };
  }
};

describe('broker.ackDeadlineSeconds', () => {
  it('is refused below 10 and above 600 s, naming the field and the range', () => {
    for (const bad of [1, 9, 601, 10.5]) {
      const error = refusal(bad);
      expect(error?.field, String(bad)).toBe('broker.ackDeadlineSeconds');
      expect(error?.message).toContain('from 10 to 600');
    }
    expect(refusal(10)).toBeUndefined();
    expect(refusal(600)).toBeUndefined();
  });

  it.skipIf(!hasPostgres)('at 10 s, the least the service takes, the consumer receives', async () => {
    const fixture = await adapterFixture(pubsub, emulator, 'deadline-10', { ackDeadlineSeconds: 60 });
    const { consumer, events } = fixture.consumer({
      broker: { ackDeadlineSeconds: 10 },
      handler: async () => {},
    });
    try {
      await consumer.start();
      await publishWithId(fixture.topic, { id: 'm1', body: {} });
      await waitFor(() => events.count('processed', 'm1') === 1, {
        timeoutMs: 30_000,
        description: 'm1 processed',
      });
    } finally {
      await fixture.drop();
    }
  });
});
