import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    name: 'memory',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    // A bound for a hang, not a measure: most tests start an embedded PostgreSQL (PGlite,
    // WebAssembly) and migrate it, which took over 30 s on Node 22 beside the serial group,
    // two JVMs and the load script (scripts/ci-under-load.sh, fresh clone of 70efc29).
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
