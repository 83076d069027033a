import { PGlite } from '@electric-sql/pglite';
import { runStoreConformance } from '@oncely/testkit';
import { afterAll } from 'vitest';
import { PostgresStore } from '../src/index.js';

// One in-process database for the file (PGlite takes seconds to start); every test gets
// its own schema in it, dropped when the test passed.
const pglite = await PGlite.create();
afterAll(() => pglite.close());

let created = 0;
runStoreConformance(
  'PGlite',
  async (options) => {
    const schema = `conformance_${++created}`;
    const store = new PostgresStore({ pglite, schema });
    if (options?.migrated !== false) await store.migrate();
    return {
      store,
      schema,
      concurrent: false,
      cleanup: async (outcome) => {
        await store.close();
        if (outcome?.passed !== false) await pglite.exec(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      },
    };
  },
  { concurrent: false },
);
