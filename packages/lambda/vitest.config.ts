import { defineConfig } from 'vitest/config';

// Outer bounds only ("does not hang"): the tests wait on responses and rows. Several start
// PGlite (a whole PostgreSQL in WebAssembly), which took over 60 s in a hook and in a test
// on a 2-core machine at load average 50-70 (scripts/ci-under-load.sh beside other work).
export default defineConfig({
  test: {
    name: 'lambda',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 180_000,
  },
});
