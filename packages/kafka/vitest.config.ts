import { defineConfig } from 'vitest/config';

// The tests run against a real Kafka broker that globalSetup starts
// (test/emulators/kafka/start.sh) unless KAFKA_BROKERS is set.
export default defineConfig({
  test: {
    name: 'kafka',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/globalSetup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
