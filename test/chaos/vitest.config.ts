import { defineConfig } from 'vitest/config';

// The chaos suite: the harness of run.mjs, run once per landed broker with a small load
// (see README.md). It imports the built packages (dist). Its runs go one after the other.
export default defineConfig({
  test: {
    name: 'chaos',
    include: ['chaos.test.ts'],
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
});
