import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: { name: 'packaging', include: ['**/*.test.ts'], testTimeout: 600_000, hookTimeout: 120_000 },
});
