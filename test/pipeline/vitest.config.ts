import { defineConfig } from 'vitest/config';

// PGlite start-up in beforeAll can take well over vitest's default 10 s hook timeout on a
// busy 2-core machine. 60 s per test: above twice hardening.test.ts' 20 s "does not hang"
// bound on a settlement (a test there waits for two).
export default defineConfig({
  test: {
    name: 'pipeline',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
