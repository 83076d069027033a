import { defineConfig } from 'vitest/config';

// OpenTelemetry spans and metrics through the SDK's in-memory exporters, the pino logger,
// and the docker-compose file. PGlite start-up in beforeAll can be slow on a busy machine.
export default defineConfig({
  test: {
    name: 'observability',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
