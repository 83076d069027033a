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
      // The backend holding the pass lock (class "odlq", key hashtext(schema, consumer, queue)).
      killDeadLetterLock: async (consumer, queue) => {
        const { rows } = await admin.query(
          `SELECT pg_terminate_backend(pid) AS ended FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = 1868852337
              AND objid = (hashtext($1::text)::bigint & 4294967295)::text::oid`,
          [`${schema}\x1f${consumer}\x1f${queue}`],
        );
        if (rows.length !== 1) throw new Error(`expected one holder of the pass lock, found ${rows.length}`);
      },
      cleanup: async (outcome) => {
        await store.close();
        if (outcome?.passed !== false) await dropSchema(schema);
      },
    };
  });
});
