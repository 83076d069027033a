import { createConsumer, isOncelyError, loadConfig, processOnce } from '@oncely/core';
import { MemoryBroker } from '@oncely/memory';
import { afterAll, describe, expect, it } from 'vitest';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
  await admin.end();
});

describe('a store by configuration', () => {
  it('loadConfig reads ONCELY_STORE_URL and refuses a URL no store package serves', () => {
    const env = { ONCELY_NAME: 'payments', ONCELY_BROKER_TYPE: 'memory' };
    expect(loadConfig({ env: { ...env, ONCELY_STORE_URL: 'mysql://app@db:3306/app' } }).store).toEqual({
      url: 'mysql://app@db:3306/app',
    });
    expect(() => loadConfig({ env: { ...env, ONCELY_STORE_URL: 'redis://db:6379' } })).toThrow(
      /ONCELY_STORE_URL has the scheme redis:\/\/; known: postgres, postgresql, mysql, mariadb/,
    );
    expect(() => loadConfig({ env: { ...env, ONCELY_STORE_URL: 'not a url' } })).toThrow(
      /ONCELY_STORE_URL must be a URL/,
    );
  });

  it.skipIf(!hasMySql)(
    'createConsumer builds a MySqlStore from ONCELY_STORE_URL, processes once, and closes the store on stop',
    async () => {
      const schema = uniqueSchema('byconfig');
      schemas.push(schema);
      const migrator = new MySqlStore({ url: mysqlUrl, schema });
      await migrator.migrate();
      await admin.query(`CREATE TABLE \`${schema}\`.effects (id VARCHAR(64) NOT NULL)`);
      const broker = new MemoryBroker();
      broker.createQueue('orders', { visibilityTimeoutMs: 30_000 });
      const loaded = loadConfig({
        env: {
          ONCELY_NAME: 'by-config',
          ONCELY_BROKER_TYPE: 'memory',
          ONCELY_BROKER_QUEUE: 'orders',
          ONCELY_STORE_URL: mysqlUrl,
          ONCELY_SCHEMA: schema,
        },
      });
      const consumer = await createConsumer({
        ...loaded,
        // The store reads ONCELY_SCHEMA from the process; in a test, say it in the config.
        store: { ...loaded.store!, schema },
        broker: { ...loaded.broker, broker },
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO \`${schema}\`.effects (id) VALUES (?)`, [message.id]);
        },
      });
      const processed: string[] = [];
      const duplicates: string[] = [];
      consumer.on('processed', (event) => processed.push(event.messageId!));
      consumer.on('duplicate', (event) => duplicates.push(event.messageId!));
      await consumer.start();
      await broker.send('orders', { id: 'o-1', body: {} });
      await broker.send('orders', { id: 'o-1', body: {} });
      const deadline = Date.now() + 20_000;
      while (processed.length + duplicates.length < 2 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await consumer.stop();
      broker.close();
      expect({ processed, duplicates }).toEqual({ processed: ['o-1'], duplicates: ['o-1'] });
      const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM \`${schema}\`.effects`);
      expect(Number((rows as Array<{ n: number }>)[0]!.n)).toBe(1);
      // The marker is in the configured database: a second store sees the message as done.
      expect(
        await processOnce(migrator, { consumer: 'by-config', messageId: 'o-1' }, async () => {}),
      ).toEqual({
        status: 'duplicate',
      });
      await migrator.close();
    },
  );

  it('an unknown scheme is a clear error from createConsumer', async () => {
    const error = await createConsumer({
      name: 'x',
      broker: { type: 'memory', queue: 'q' },
      store: { url: 'oracle://db/x' },
      handler: async () => {},
    }).catch((e: unknown) => e);
    expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toMatch(/store.url has the scheme oracle:\/\//);
  });
});
