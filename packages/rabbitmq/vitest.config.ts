import { defineConfig } from 'vitest/config';

// The default project leaves out *.slow.test.ts: those change server-wide RabbitMQ settings
// (consumer_timeout) and must run alone: `npx vitest run --config packages/rabbitmq/vitest.slow.config.ts`.
export default defineConfig({
  test: {
    name: 'rabbitmq',
    sequence: { groupOrder: 1 },
    include: ['test/**/*.test.ts'],
    exclude: ['test/**/*.slow.test.ts', '**/node_modules/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
