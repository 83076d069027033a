/**
 * The testkit's crash-test machinery (scenarios 5, 6 and 17: a consumer child process
 * SIGKILLed right after / right before its commit) run against a queue kept in a
 * PostgreSQL table, which outlives the killed process the way a real broker does. The
 * memory broker cannot show this (it lives in the test process); real adapters run the
 * same scenarios against their brokers. Scenario 13 (server-side disconnect) runs here
 * too: PostgreSQL terminates the consumers' sessions, the memory broker has none. So
 * does 16: a release raises this queue's delivery count, the memory broker's does not.
 * And 19: this queue's close() ends its connections, so a release sent after it fails.
 */
import { requireService, runAdapterConformance } from '@oncely/testkit';
import { describe } from 'vitest';
import { probePostgres } from './memoryHarness.js';
import { pgQueueFeatures, pgQueueHarness } from './pgQueueHarness.js';

const hasPostgres = await requireService('PostgreSQL', probePostgres);

// Under CI=true (what scripts/test.sh sets) a missing PostgreSQL fails the run instead.
describe.skipIf(!hasPostgres)(
  hasPostgres ? 'crossProcess machinery' : 'crossProcess machinery [skipped: PostgreSQL is not reachable]',
  () => {
    runAdapterConformance({
      name: 'crash-test child process on a PostgreSQL-table queue',
      features: pgQueueFeatures,
      createHarness: () => pgQueueHarness(),
      only: [5, 6, 13, 16, 17, 19],
    });
  },
);
