/**
 * Kafka chaos with the consumers on @platformatic/kafka (`broker.client: 'platformatic'`),
 * issue 32. The same checks as the kafkajs run of chaos.long.test.ts — every order applied
 * exactly once, counted from the database and the provider's ledger, every fault fired —
 * at a smaller load: it runs in the test command's Node 22 job, after the main run, where
 * its time is added to the command's. @platformatic/kafka needs Node >= 22.22, and the
 * consumer processes run on the runner's Node: vitest.config.ts collects this file only
 * under ONCELY_KAFKA_CLIENT=platformatic on such a Node (that job, not the main run's chaos
 * phase), and the harness refuses a run on an older one anyway.
 */
import { describe, it } from 'vitest';
import { chaos, expectExactlyOnce, hasKafka, hasPostgres } from './support.js';

describe.skipIf(!hasPostgres || !hasKafka)('chaos: Kafka on @platformatic/kafka', () => {
  it('every order applied exactly once under kills, drops and a broker restart', async () => {
    // 300 orders, 3 kills (one at random, one at each crash point): every fault of the
    // kafkajs run still fires (expectExactlyOnce checks that each did).
    const result = await chaos('kafka', { kafkaClient: 'platformatic', messages: 300, kills: 3 });
    expectExactlyOnce(result, { brokerRestart: true, brokerDrop: true, kills: 3 });
  });
});
