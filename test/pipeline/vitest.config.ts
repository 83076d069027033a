import { defineConfig } from 'vitest/config';

// PGlite start-up in beforeAll can take well over vitest's default 10 s hook timeout on a
// busy 2-core machine.
export default defineConfig({
  test: { name: 'pipeline', include: ['**/*.test.ts'], testTimeout: 30_000, hookTimeout: 60_000 },
});
