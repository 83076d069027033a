/**
 * The memory broker (@oncely/memory) against the adapter conformance suite with the MySQL
 * store (@oncely/mysql) on the real MariaDB: the same scenarios as memory.test.ts, the
 * effects written through `ctx.tx` in MySQL's dialect. Scenario 14 cuts MariaDB through
 * the testkit's TCP proxy.
 */
import { requireService, runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { memoryFeatures, memoryHarness, probeMySql } from './memoryHarness.js';

const hasMySql = await requireService('MariaDB', probeMySql);

describe.skipIf(!hasMySql)('memory broker, MySQL store', () => {
  runAdapterConformance({
    name: 'memory broker conformance (real MariaDB, @oncely/mysql)',
    features: memoryFeatures,
    createHarness: () => memoryHarness({ store: 'mysql' }),
  });
});
