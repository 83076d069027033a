import { defineConfig } from 'vitest/config';

// Each test runs `tsc` on a small program against the built packages (dist): a few
// seconds of CPU each on a busy machine.
export default defineConfig({
  test: {
    name: 'types',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});
