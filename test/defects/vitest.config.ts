import { defineConfig } from 'vitest/config';

// The planted defects: every conformance scenario must go red, for the reason it names,
// when the defect it exists to catch is planted. Part of `npm test`.
export default defineConfig({
  test: {
    name: 'defects',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // The defect suites run side by side (describe.concurrent): they mostly wait on
    // brokers and deadlines. Bounded so the shared PostgreSQL and two cores keep up.
    maxConcurrency: 5,
  },
});
