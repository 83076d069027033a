import { runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { FEATURES, hasMySql, hasRabbit, rabbitHarness } from './conformanceHarness.js';

// The conformance suite on a classic queue with @oncely/mysql on the real MariaDB.
describe.skipIf(!hasRabbit || !hasMySql)('RabbitMQ adapter conformance, MySQL store', () => {
  runAdapterConformance({
    name: 'classic queue (real MariaDB, @oncely/mysql)',
    features: FEATURES,
    createHarness: () => rabbitHarness('classic', 'mysql'),
  });
});
