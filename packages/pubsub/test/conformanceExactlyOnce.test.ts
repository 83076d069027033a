import { runAdapterConformance } from '@oncely/testkit';
import { it } from 'vitest';
import { createHarness, features } from './harness.js';
import { postgresAvailable } from './support.js';

// The shared adapter conformance suite (shared/CONFORMANCE.md) with the real PostgreSQL
// store, on the in-process Pub/Sub emulator, exactly-once delivery ON: only the latest ack ID is valid, so
// the losing side of scenario 8 sees its ack refused (staleAckDetectable).

const hasPostgres = await postgresAvailable();
// Debugging aid: PUBSUB_CONFORMANCE_ONLY=4,11 runs just those scenarios.
const only = process.env.PUBSUB_CONFORMANCE_ONLY?.split(',').map(Number);

if (!hasPostgres) {
  it.skip('Pub/Sub adapter conformance [skipped: PostgreSQL is not reachable]', () => {});
} else {
  runAdapterConformance({
    name: 'Pub/Sub adapter conformance (emulator, exactly-once on + PostgreSQL)',
    features: features(true),
    createHarness: () => createHarness(true),
    only,
  });
}
