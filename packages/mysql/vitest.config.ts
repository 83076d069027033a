import { defineConfig } from 'vitest/config';

// The real MariaDB is shared with other test runs on a busy machine, and some tests kill
// connections through a TCP proxy: generous per-test limits, while each test still waits
// on conditions with its own deadlines. The global setup starts MariaDB when it is not
// running (and fails under CI=true when it cannot).
export default defineConfig({
  test: {
    name: 'mysql',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/globalSetup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
