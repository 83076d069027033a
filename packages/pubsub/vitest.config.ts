import { defineConfig } from 'vitest/config';

// isolate: false — the files of this project share their worker process instead of a fork
// each: a fork costs ~0.65 CPU-s of Node start-up and imports, on a 2-core CI machine that
// is CPU-bound (sqs + emulators: 114 -> 84 CPU-s). Each file restores what it changes in the
// process (environment variables, fake timers); the postgres and lambda projects do not
// (their files failed together), so they keep vitest's default.
export default defineConfig({
  test: {
    name: 'pubsub',
    isolate: false,
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The tests talk to the in-process emulator only: no probing for a GCE metadata
    // server (google-auth-library otherwise tries, and warns on every client).
    env: { METADATA_SERVER_DETECTION: 'none' },
  },
});
