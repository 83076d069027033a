import { configDefaults, defineConfig } from 'vitest/config';

// @platformatic/kafka needs Node >= 22.22: the file that runs only on it is not collected
// on an older Node (the main run); it runs in the test command's Node 22 job.
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const runsPlatformatic = major > 22 || (major === 22 && minor >= 22);

// The tests run against a real Kafka broker that globalSetup starts
// (test/emulators/kafka/start.sh) unless KAFKA_BROKERS is set.
export default defineConfig({
  test: {
    name: 'kafka',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    exclude: [...configDefaults.exclude, ...(runsPlatformatic ? [] : ['test/platformaticInjected.test.ts'])],
    globalSetup: ['test/globalSetup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
