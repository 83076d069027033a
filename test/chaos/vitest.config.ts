import { defineConfig } from 'vitest/config';

// The chaos suite: the harness of run.mjs, run once per landed broker with a small load
// (see README.md). It imports the built packages (dist). The runs of one file go one
// after the other; the three files run side by side.
export default defineConfig({
  test: {
    name: 'chaos',
    include: ['*.test.ts'],
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
});
