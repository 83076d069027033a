import { defineConfig } from 'vitest/config';

// The root docker-compose.yml, checked without a Docker engine: YAML, the Compose schema,
// images, ports, and the Service Bus emulator's Config.json.
export default defineConfig({
  test: {
    name: 'docker',
    sequence: { groupOrder: 1 },
    include: ['**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
