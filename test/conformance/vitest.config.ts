import { defineConfig } from 'vitest/config';

// Conformance runs that live outside the adapter packages: the memory broker's (memory
// cannot dev-depend on the testkit, see DESIGN.md §2). They import the built packages.
export default defineConfig({
  test: {
    name: 'conformance',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    // Scenarios of one file run one after the other; files may run side by side.
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
