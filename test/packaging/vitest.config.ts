import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    name: 'packaging',
    // Phase 0 with test/chaos, three at a time: see the root vitest.config.ts.
    maxWorkers: 3,
    sequence: { groupOrder: 0 },
    include: ['**/*.test.ts'],
    testTimeout: 600_000,
    hookTimeout: 120_000,
  },
});
