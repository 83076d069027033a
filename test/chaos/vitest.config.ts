import { defineConfig } from 'vitest/config';

// The chaos suite: the harness of run.mjs, run once per landed broker with a small load
// (see README.md). It imports the built packages (dist). The runs of one file go one
// after the other; the three files run side by side.
export default defineConfig({
  test: {
    name: 'chaos',
    // Phase 0 with test/packaging, three at a time: see the root vitest.config.ts.
    maxWorkers: 3,
    sequence: { groupOrder: 0 },
    include: ['*.test.ts'],
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
});
