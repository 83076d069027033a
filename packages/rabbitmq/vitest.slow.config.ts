import { defineConfig } from 'vitest/config';

// The serial slow group: tests that change server-wide RabbitMQ settings and so must not
// run beside anything else. Not part of the default 'rabbitmq' project. Run alone with
//   npx vitest run --config packages/rabbitmq/vitest.slow.config.ts
export default defineConfig({
  test: {
    name: 'rabbitmq-slow',
    root: import.meta.dirname,
    include: ['test/**/*.slow.test.ts'],
    fileParallelism: false,
    testTimeout: 240_000,
    hookTimeout: 60_000,
  },
});
