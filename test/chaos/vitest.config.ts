import { configDefaults, defineConfig } from 'vitest/config';

// @platformatic/kafka needs Node >= 22.22: its chaos file runs in the test command's
// Node 22 job (scripts/test.sh), and is not collected on an older Node (the main run).
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const runsPlatformatic = major > 22 || (major === 22 && minor >= 22);

// The chaos suite: the harness of run.mjs, run once per landed broker with a small load
// (see README.md). It imports the built packages (dist). The runs of one file go one
// after the other; the three files run side by side.
export default defineConfig({
  test: {
    name: 'chaos',
    // Phase 0 with test/packaging, three at a time: see the root vitest.config.ts.
    maxWorkers: 3,
    sequence: { groupOrder: 0 },
    include: ['*.test.ts'],
    exclude: [...configDefaults.exclude, ...(runsPlatformatic ? [] : ['chaos.kafkaPlatformatic.test.ts'])],
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
});
