import { runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { FEATURES, hasPostgres, hasRabbit, rabbitHarness } from './conformanceHarness.js';

// The conformance suite on a classic queue and PostgreSQL (a quorum queue with the MariaDB
// store: conformance.mysql.test.ts).
describe.skipIf(!hasRabbit || !hasPostgres)('RabbitMQ adapter conformance', () => {
  runAdapterConformance({
    name: 'classic queue',
    features: FEATURES,
    createHarness: () => rabbitHarness('classic'),
  });
});
