import { defineConfig } from 'vitest/config';

// One root config; each package and test/ folder is a project. Tests import the built
// packages (dist), so `npm test` builds first.
export default defineConfig({
  test: {
    projects: ['packages/*/vitest.config.ts', 'test/*/vitest.config.ts', 'examples/*/vitest.config.ts'],
    // Most test time is waiting on brokers, leases and timers, not CPU: three files at a
    // time on this 2-core machine keep the whole command well under its 25-minute budget.
    maxWorkers: 3,
  },
});
