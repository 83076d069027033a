import { OutboxUnsupportedError, publishInTransaction } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

// The MySQL store has no outbox (README: 'ctx.publish throws OutboxUnsupportedError'):
// publishing in one of its transactions is refused with that error, naming what is
// missing, and the transaction rolls back instead of committing without the message.
describe.skipIf(!hasMySql)('the outbox on a MySqlStore', () => {
  it('publishInTransaction throws OutboxUnsupportedError, and the transaction does not commit', async () => {
    const schema = uniqueSchema('outbox');
    const store = new MySqlStore({ url: mysqlUrl, schema });
    try {
      await store.migrate();
      await admin.query(`CREATE TABLE \`${schema}\`.effects (id VARCHAR(64) NOT NULL)`);
      let reached = false;
      const outcome = store.transaction(async (tx) => {
        await tx.query(`INSERT INTO \`${schema}\`.effects(id) VALUES ('o-1')`);
        await publishInTransaction(store, tx, 'orders', { id: 1 });
        reached = true;
      });
      await expect(outcome).rejects.toBeInstanceOf(OutboxUnsupportedError);
      await expect(outcome).rejects.toMatchObject({
        code: 'OUTBOX_UNSUPPORTED',
        message: expect.stringMatching(/this store has no outbox/),
      });
      expect(reached).toBe(false);
      const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM \`${schema}\`.effects`);
      expect(Number((rows as Array<{ n: number }>)[0]!.n), 'effects committed without the message').toBe(0);
    } finally {
      await store.close();
      await dropSchema(schema);
    }
  });
});
