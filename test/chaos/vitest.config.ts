import { configDefaults, defineConfig } from 'vitest/config';

// The chaos run with its Kafka consumers on @platformatic/kafka (Node >= 22.22) runs in the
// test command's Kafka-on-platformatic job (scripts/test.sh, ONCELY_KAFKA_CLIENT=platformatic,
// after the main run, beside the serial group), not in the main run's chaos phase: it is
// collected only under that variable, on a Node that runs the client.
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const runsPlatformatic =
  process.env.ONCELY_KAFKA_CLIENT === 'platformatic' && (major > 22 || (major === 22 && minor >= 22));

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
