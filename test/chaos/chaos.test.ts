/**
 * The chaos harness (run.mjs, see README.md) in CI, split over three files so vitest runs
 * them side by side: this one (memory, RabbitMQ, SQS, Pub/Sub), chaos.long.test.ts
 * (Service Bus, Kafka) and chaos.defects.test.ts (the broken consumers). Shared setup and
 * checks are in support.ts.
 */
import { describe, it } from 'vitest';
import { chaos, expectExactlyOnce, hasPostgres, hasRabbit } from './support.js';

describe.skipIf(!hasPostgres)('chaos: every order applied exactly once under kills and outages', () => {
  it('memory broker (in-process virtual processes)', async () => {
    expectExactlyOnce(await chaos('memory'));
  });

  it.skipIf(!hasRabbit)('RabbitMQ', async () => {
    expectExactlyOnce(await chaos('rabbitmq'), { brokerDrop: true });
  });

  it('SQS on fauxqs', async () => {
    expectExactlyOnce(await chaos('sqs'), { brokerRestart: true, brokerDrop: true });
  });

  it('Pub/Sub on the Oncely emulator (streams dropped, restarted mid-run)', async () => {
    expectExactlyOnce(await chaos('pubsub'), { brokerRestart: true, brokerDrop: true });
  });
});
