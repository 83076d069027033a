import { runAdapterConformance } from '@oncely/testkit';
import { it } from 'vitest';
import { createHarness, features } from './harness.js';
import { postgresAvailable } from './support.js';

// The shared adapter conformance suite (shared/CONFORMANCE.md) with the real PostgreSQL
// store, on the in-process Pub/Sub emulator, exactly-once delivery OFF. The exactly-once
// run is conformanceExactlyOnce.test.ts (a file of its own so the two run side by side).

const hasPostgres = await postgresAvailable();
// Debugging aid: PUBSUB_CONFORMANCE_ONLY=4,11 runs just those scenarios.
const only = process.env.PUBSUB_CONFORMANCE_ONLY?.split(',').map(Number);

if (!hasPostgres) {
  it.skip('Pub/Sub adapter conformance [skipped: PostgreSQL is not reachable]', () => {});
} else {
  runAdapterConformance({
    name: 'Pub/Sub adapter conformance (emulator, exactly-once off + PostgreSQL)',
    features: features(false),
    createHarness: () => createHarness(false),
    only,
  });
}
