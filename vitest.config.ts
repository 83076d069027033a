import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './test/sequencer/longestFirst.ts';

// One root config; each package and test/ folder is a project. Tests import the built
// packages (dist), so `npm test` builds first.
export default defineConfig({
  test: {
    projects: ['packages/*/vitest.config.ts', 'test/*/vitest.config.ts', 'examples/*/vitest.config.ts'],
    // Most test time is waiting on brokers, leases and timers, not CPU: three files at a
    // time on this 2-core machine keep the whole command well under its 25-minute budget.
    maxWorkers: 3,
    // The longest files first, from a measured run's durations: see the sequencer.
    sequence: { sequencer: LongestFirstSequencer },
  },
});
