import { runStoreConformance } from '@oncely/testkit';
import { afterAll, describe } from 'vitest';
import { passLockName } from '../src/deadLetterLog.js';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, MYSQL_DIALECT, mysqlUrl, uniqueSchema } from './serverEnv.js';

afterAll(() => admin.end());

// Each test gets its own database; a failing test's database is kept as evidence.
describe.skipIf(!hasMySql)('real MariaDB server', () => {
  runStoreConformance('MariaDB', async (options) => {
    const schema = uniqueSchema('conformance');
    const open = () => new MySqlStore({ url: mysqlUrl, schema, poolMax: 6 });
    const store = open();
    if (options?.migrated !== false) await store.migrate();
    return {
      store,
      schema,
      sql: MYSQL_DIALECT,
      concurrent: true,
      sibling: async () => open(),
      killDeadLetterLock: async (consumer, queue) => {
        const [rows] = await admin.query('SELECT IS_USED_LOCK(?) AS id', [
          passLockName(schema, consumer, queue),
        ]);
        const id = (rows as Array<{ id: number | null }>)[0]?.id;
        if (id === null || id === undefined) throw new Error('nobody holds the pass lock');
        await admin.query(`KILL ${Number(id)}`);
      },
      cleanup: async (outcome) => {
        await store.close();
        if (outcome?.passed !== false) await dropSchema(schema);
      },
    };
  });
});
