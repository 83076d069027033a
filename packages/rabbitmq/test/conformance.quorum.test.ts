import { runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { FEATURES, hasPostgres, hasRabbit, rabbitHarness } from './conformanceHarness.js';

// The conformance suite on a quorum queue (it counts deliveries) and PostgreSQL.
describe.skipIf(!hasRabbit || !hasPostgres)('RabbitMQ adapter conformance', () => {
  runAdapterConformance({
    name: 'quorum queue',
    features: { ...FEATURES, deliveryCount: true },
    createHarness: () => rabbitHarness('quorum'),
  });
});
