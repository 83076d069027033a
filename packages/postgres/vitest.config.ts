import { defineConfig } from 'vitest/config';

// PGlite starts in ~2-3 s on a busy 2-core machine, and the real-server tests kill child
// processes: generous per-test limits, while each test still waits on conditions with
// its own deadlines.
export default defineConfig({
  test: {
    name: 'postgres',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
