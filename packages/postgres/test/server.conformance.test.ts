import { runStoreConformance } from '@oncely/testkit';
import { afterAll, describe } from 'vitest';
import { PostgresStore } from '../src/index.js';
import { admin, connectionString, dropSchema, hasPostgres, uniqueSchema } from './serverEnv.js';

afterAll(() => admin.end());

// Each test gets its own schema; a failing test's schema is kept as evidence.
describe.skipIf(!hasPostgres)('real PostgreSQL server', () => {
  runStoreConformance('PostgreSQL', async (options) => {
    const schema = uniqueSchema('conformance');
    const open = () => new PostgresStore({ connectionString, schema, poolMax: 6 });
    const store = open();
    if (options?.migrated !== false) await store.migrate();
    return {
      store,
      schema,
      concurrent: true,
      sibling: async () => open(),
      cleanup: async (outcome) => {
        await store.close();
        if (outcome?.passed !== false) await dropSchema(schema);
      },
    };
  });
});
