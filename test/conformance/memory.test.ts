/**
 * The memory broker (@oncely/memory) against the adapter conformance suite, with the real
 * PostgreSQL store. The memory broker lives in this process, so the crossProcess
 * scenarios (5, 6) are skipped by feature; it has no server to disconnect or restart.
 */
import { requireService, runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { memoryFeatures, memoryHarness, probePostgres } from './memoryHarness.js';

const hasPostgres = await requireService('PostgreSQL', probePostgres);

describe.skipIf(!hasPostgres)('memory broker', () => {
  runAdapterConformance({
    name: 'memory broker conformance (real PostgreSQL)',
    features: memoryFeatures,
    createHarness: memoryHarness,
  });
});
