import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    name: 'cli',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
