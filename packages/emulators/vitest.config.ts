import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    name: 'emulators',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
