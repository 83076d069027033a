import { defineConfig } from 'vitest/config';

export default defineConfig({ test: { name: 'pipeline', include: ['**/*.test.ts'], testTimeout: 30_000 } });
