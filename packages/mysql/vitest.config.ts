import { defineConfig } from 'vitest/config';

// The real MariaDB is shared with other test runs on a busy machine, and some tests kill
// connections through a TCP proxy: generous per-test limits, while each test still waits
// on conditions with its own deadlines. The global setup starts MariaDB when it is not
// running (and fails under CI=true when it cannot).
// isolate: false — the files of this project share their worker process instead of a fork
// each: a fork costs ~0.65 CPU-s of Node start-up and imports, on a 2-core CI machine that
// is CPU-bound (sqs + emulators: 114 -> 84 CPU-s). Each file restores what it changes in the
// process (environment variables, fake timers); the postgres and lambda projects do not
// (their files failed together), so they keep vitest's default.
export default defineConfig({
  test: {
    name: 'mysql',
    isolate: false,
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/globalSetup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
