import { defineConfig } from 'vitest/config';

// Runs the first example of every package README as a user would: a `node` process each,
// several at a time, some on emulators started in-process, one on a Kafka broker of its own.
export default defineConfig({
  test: {
    name: 'readmes',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    testTimeout: 300_000,
    hookTimeout: 120_000,
  },
});
