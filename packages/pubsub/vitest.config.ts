import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    name: 'pubsub',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The tests talk to the in-process emulator only: no probing for a GCE metadata
    // server (google-auth-library otherwise tries, and warns on every client).
    env: { METADATA_SERVER_DETECTION: 'none' },
  },
});
