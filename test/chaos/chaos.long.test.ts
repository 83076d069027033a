/** Chaos runs that take longest (Service Bus, Kafka); see chaos.test.ts. */
import { describe, it } from 'vitest';
import { chaos, expectExactlyOnce, hasKafka, hasPostgres } from './support.js';

describe.skipIf(!hasPostgres)(
  'chaos: every order applied exactly once under kills and outages (long runs)',
  () => {
    it('Service Bus on the Oncely emulator (connections dropped, restarted mid-run)', async () => {
      expectExactlyOnce(await chaos('servicebus'), { brokerRestart: true, brokerDrop: true });
    });

    it.skipIf(!hasKafka)('Kafka (a broker of its own, restarted mid-run)', async () => {
      expectExactlyOnce(await chaos('kafka', { kills: 3 }), {
        brokerRestart: true,
        brokerDrop: true,
        kills: 3,
      });
    });
  },
);
