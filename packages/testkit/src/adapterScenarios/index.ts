/**
 * Every adapter conformance scenario, in number order (shared/CONFORMANCE.md). The runner
 * ({@link runAdapterConformance}) registers them as vitest tests. Each scenario's comment
 * names the defect it must catch and how it was checked to go red.
 */

import { crashLoop, crashScenario } from './crashes.js';
import { ackLost, failureBeforeCommit, happyPath, producerDuplicates } from './delivery.js';
import { poison, releasesNotAttempts, retryDelay } from './failures.js';
import { competingConsumers, leaseLost, longHandler } from './leases.js';
import { ordering } from './ordering.js';
import { serverDisconnect, storeOutage } from './outages.js';
import { noRetention } from './retention.js';
import type { Scenario } from './scenario.js';
import { gracefulStop, stopDuringStart, stopSettles } from './stopping.js';

export const SCENARIOS: readonly Scenario[] = [
  happyPath,
  producerDuplicates,
  ackLost,
  failureBeforeCommit,
  crashScenario(5, 'after-commit'),
  crashScenario(6, 'before-commit'),
  longHandler,
  leaseLost,
  competingConsumers,
  poison,
  retryDelay,
  gracefulStop,
  serverDisconnect,
  storeOutage,
  ordering,
  releasesNotAttempts,
  crashLoop,
  noRetention,
  stopSettles,
  stopDuringStart,
];
