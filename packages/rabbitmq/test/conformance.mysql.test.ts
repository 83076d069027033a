import { runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { FEATURES, hasMySql, hasRabbit, rabbitHarness } from './conformanceHarness.js';

// The conformance suite on a quorum queue (it counts deliveries) with @oncely/mysql on the
// real MariaDB. Queue type and store are independent of each other (the queue type is the
// adapter's, the store is the core's), so two runs cover both of each pairwise: a classic
// queue on PostgreSQL (conformance.test.ts) and this one. A third run (quorum on
// PostgreSQL, until 2026-12-06) repeated both halves at ~130 s of the CI budget.
describe.skipIf(!hasRabbit || !hasMySql)('RabbitMQ adapter conformance, MySQL store', () => {
  runAdapterConformance({
    name: 'quorum queue (real MariaDB, @oncely/mysql)',
    features: { ...FEATURES, deliveryCount: true },
    createHarness: () => rabbitHarness('quorum', 'mysql'),
  });
});
