import { defineConfig } from 'vitest/config';

export default defineConfig({ test: { name: 'rabbitmq', include: ['test/**/*.test.ts'] } });
