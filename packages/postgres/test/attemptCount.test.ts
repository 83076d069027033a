/**
 * The up-front attempt count (store.recordAttempt) is a commit of its own on the hot path
 * wherever the broker gives no delivery count (Pub/Sub without a dead-letter policy,
 * Kafka's first record of a partition after an assignment). It commits without waiting
 * for the WAL flush (synchronous_commit off for that one transaction): these tests pin
 * what is sent, that the setting really applies to that transaction, and that it never
 * outlives it on the pooled connection. That the count survives a consumer process kill
 * is conformance scenario 17 (crash-loop), run by test/conformance/crossProcess.test.ts
 * and every adapter's conformance suite on this store.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { PostgresStore } from '../src/index.js';
import { admin, connectionString, dropSchema, hasPostgres, uniqueSchema } from './serverEnv.js';

const NO_FLUSH_WAIT = /set_config\('synchronous_commit', 'off', true\)/;

interface Sent {
  text: string;
  values: unknown[] | undefined;
}

/** A one-connection pool that records every statement the store sends through it. */
function recordingPool(sent: Sent[]) {
  const pool = new pg.Pool({ connectionString, max: 1 });
  return {
    pool,
    recording: {
      async connect() {
        const client = await pool.connect();
        return new Proxy(client, {
          get(target, property) {
            if (property === 'query') {
              return (text: string | { text: string; values?: unknown[] }, values?: unknown[]) => {
                const config = typeof text === 'string' ? { text, values } : text;
                sent.push({ text: config.text, values: config.values });
                return target.query(text as string, values);
              };
            }
            const value = Reflect.get(target, property);
            return typeof value === 'function' ? value.bind(target) : value;
          },
        });
      },
      on: (event: string, listener: (...args: unknown[]) => void) => pool.on(event as 'error', listener),
      removeListener: (event: string, listener: (...args: unknown[]) => void) =>
        pool.removeListener(event as 'error', listener),
      end: () => pool.end(),
    } as unknown as pg.Pool,
  };
}

const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
});

describe.skipIf(!hasPostgres)('the up-front attempt count', () => {
  // Catches: the count waiting for the WAL flush again (one fsync per message on the
  // hot path), or the setting being dropped from the statement.
  it('is one statement that turns synchronous_commit off for its own transaction', async () => {
    const schema = uniqueSchema('attempts');
    schemas.push(schema);
    const sent: Sent[] = [];
    const { pool, recording } = recordingPool(sent);
    const store = new PostgresStore({ pool: recording, schema });
    try {
      await store.migrate();
      const key = { consumer: 'count', messageId: 'm-1' };
      await store.recordAttempt(key); // the first call also checks the schema
      sent.length = 0;
      expect(await store.recordAttempt(key)).toBe(2);
      expect(sent, 'statements of one recordAttempt once the schema is known').toHaveLength(1);
      expect(sent[0]!.text).toMatch(NO_FLUSH_WAIT);

      // Catches: a set_config the planner never evaluates (an unreferenced CTE is not
      // run), which would leave the commit waiting for the flush with nothing to show.
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query(sent[0]!.text, sent[0]!.values);
        const { rows } = await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
        expect(rows[0]!.synchronous_commit, 'inside the counting transaction').toBe('off');
        await client.query('ROLLBACK');
        // Catches: a session-wide setting, which would leave every later transaction on
        // this pooled connection (the handlers' commits included) without the flush wait.
        const after = await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
        expect(after.rows[0]!.synchronous_commit, 'after it, on the same connection').toBe('on');
      } finally {
        client.release();
      }
      const { rows } = await admin.query<{ attempts: number }>(
        `SELECT attempts FROM "${schema}".attempts WHERE consumer = 'count' AND message_id = 'm-1'`,
      );
      expect(rows[0]!.attempts, 'the rolled-back replay counted nothing').toBe(2);
    } finally {
      await store.close();
      await pool.end();
    }
  });

  // Catches: the autocommit statement leaking the setting into the pooled session.
  it('leaves the pooled connection with synchronous_commit on', async () => {
    const schema = uniqueSchema('attempts');
    schemas.push(schema);
    const store = new PostgresStore({ connectionString, schema, poolMax: 1 });
    try {
      await store.migrate();
      expect(await store.recordAttempt({ consumer: 'count', messageId: 'm-2' })).toBe(1);
      const setting = await store.transaction((tx) =>
        tx.query<{ synchronous_commit: string }>('SHOW synchronous_commit'),
      );
      expect(setting.rows[0]!.synchronous_commit).toBe('on');
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(!hasPostgres)('clearing the count of a processed message', () => {
  // Catches: a DELETE wider than its key (another message's or consumer's count lost,
  // which would let a crash-looping message run past maxAttempts), and the statement
  // waiting for the WAL flush on the path of every counted message that succeeds.
  it('deletes only that message’s counter, in one statement without the flush wait', async () => {
    const schema = uniqueSchema('attempts');
    schemas.push(schema);
    const sent: Sent[] = [];
    const { pool, recording } = recordingPool(sent);
    const store = new PostgresStore({ pool: recording, schema });
    try {
      await store.migrate();
      for (const key of [
        { consumer: 'count', messageId: 'done' },
        { consumer: 'count', messageId: 'other' },
        { consumer: 'elsewhere', messageId: 'done' },
      ]) {
        await store.recordAttempt(key);
      }
      sent.length = 0;
      await store.clearAttempts({ consumer: 'count', messageId: 'done' });
      expect(sent, 'statements of one clearAttempts').toHaveLength(1);
      expect(sent[0]!.text).toMatch(NO_FLUSH_WAIT);
      const { rows } = await admin.query<{ consumer: string; message_id: string }>(
        `SELECT consumer, message_id FROM "${schema}".attempts ORDER BY consumer, message_id`,
      );
      expect(rows).toEqual([
        { consumer: 'count', message_id: 'other' },
        { consumer: 'elsewhere', message_id: 'done' },
      ]);
      // No row: nothing to do, no error.
      await store.clearAttempts({ consumer: 'count', messageId: 'never-counted' });

      // Catches: a setting the planner never evaluates (the DELETE's WHERE must run it).
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query(sent[0]!.text, ['count', 'other']);
        const { rows: setting } = await client.query<{ synchronous_commit: string }>(
          'SHOW synchronous_commit',
        );
        expect(setting[0]!.synchronous_commit, 'inside the clearing transaction').toBe('off');
        await client.query('ROLLBACK');
      } finally {
        client.release();
      }
    } finally {
      await store.close();
      await pool.end();
    }
  });
});
