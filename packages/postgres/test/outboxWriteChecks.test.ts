/**
 * What an outbox write accepts (#26, D4-D7), on the real PostgreSQL. Before the fix
 * `store.outbox.write()` (public) checked nothing: an empty destination, ID or key was
 * stored and sent; a NUL character in a key or ID came back as PostgreSQL's raw 22021
 * error; an array was accepted as attributes; a second message under an ID already written
 * was dropped without a word (ON CONFLICT DO NOTHING); an ArrayBuffer or DataView body was
 * sent as "{}".
 */
import type { OutboxMessage, OutboxProducer, OutboxSendResult, OutboxWrite } from '@oncely/core';
import { isOncelyError, publishInTransaction } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, stores } = cleanupAfterFile();

async function openStore(): Promise<PostgresStore> {
  const schema = uniqueSchema('outbox_write');
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
  stores.push(store);
  await store.migrate();
  return store;
}

async function ids(store: PostgresStore): Promise<string[]> {
  const { rows } = await admin.query<{ id: string }>(
    `SELECT id FROM "${store.schema}".outbox ORDER BY position`,
  );
  return rows.map((row) => row.id);
}

/** The error a write in its own transaction raises (the transaction rolls back). */
async function writeError(store: PostgresStore, message: OutboxWrite): Promise<unknown> {
  try {
    await store.transaction((tx) => store.outbox.write(tx, message));
  } catch (error) {
    return error;
  }
  return undefined;
}

const valid: OutboxWrite = { id: 'm-1', destination: 'q', body: { n: 1 }, attributes: {} };

describe.skipIf(!hasPostgres)('outbox writes', { timeout: 120_000 }, () => {
  it('store.outbox.write() refuses what publish refuses, with ConfigError, before any SQL', async () => {
    const store = await openStore();
    const cases: Array<[string, OutboxWrite]> = [
      ['empty destination', { ...valid, destination: '' }],
      ['empty id', { ...valid, id: '' }],
      ['empty key', { ...valid, key: '' }],
      ['NUL in the id', { ...valid, id: 'a\0b' }],
      ['NUL in the key', { ...valid, key: 'k\0' }],
      ['NUL in the destination', { ...valid, destination: 'q\0' }],
      ['NUL in an attribute', { ...valid, attributes: { a: 'x\0' } }],
      ['attributes as an array', { ...valid, attributes: ['x'] as never }],
      ['a non-string attribute', { ...valid, attributes: { n: 1 } as never }],
      ['no body', { ...valid, body: undefined }],
    ];
    const outcomes = [];
    for (const [what, message] of cases) {
      const error = await writeError(store, message);
      outcomes.push(`${what}: ${isOncelyError(error, 'CONFIG_INVALID') ? 'CONFIG_INVALID' : String(error)}`);
    }
    expect(outcomes).toEqual(cases.map(([what]) => `${what}: CONFIG_INVALID`));
    // The same through publish: a NUL key and array attributes.
    await store.transaction(async (tx) => {
      for (const options of [{ key: 'k\0' }, { id: 'x\0' }, { attributes: ['a'] as never }]) {
        await expect(publishInTransaction(store, tx, 'q', {}, options)).rejects.toSatisfy((error) =>
          isOncelyError(error, 'CONFIG_INVALID'),
        );
      }
    });
    expect(await ids(store)).toEqual([]);
  });

  it('another message under an ID already written is refused; the same message again is one row', async () => {
    const store = await openStore();
    await store.transaction(async (tx) => {
      await store.outbox.write(tx, { ...valid, attributes: { a: '1', b: '2' } });
      // The same message again (attributes in another order): idempotent, no error.
      await store.outbox.write(tx, { ...valid, attributes: { b: '2', a: '1' } });
    });
    const conflicts: Array<[string, Partial<OutboxWrite>]> = [
      ['body', { body: { n: 2 } }],
      ['destination', { destination: 'other' }],
      ['key', { key: 'k' }],
      ['attributes', { attributes: { a: '1' } }],
    ];
    for (const [field, change] of conflicts) {
      const error = await writeError(store, { ...valid, attributes: { a: '1', b: '2' }, ...change });
      expect(isOncelyError(error, 'OUTBOX_ID_CONFLICT'), `${field}: ${String(error)}`).toBe(true);
      expect(String((error as Error).message)).toContain(field);
    }
    expect(await ids(store)).toEqual(['m-1']);
  });

  it('a JSON body with its object keys in another order is the same message, not a conflict', async () => {
    // A handler re-run after its marker was pruned (or a handler that builds its body by
    // merging objects in arrival order) publishes the same JSON with keys in another order:
    // the bytes differ, the message does not. Byte-wise that was OUTBOX_ID_CONFLICT, the
    // handler threw on every redelivery of a message it had handled correctly.
    const store = await openStore();
    await store.transaction((tx) =>
      store.outbox.write(tx, { ...valid, body: { order: 7, lines: [{ sku: 'a', qty: 1 }], total: 3 } }),
    );
    const again = await writeError(store, {
      ...valid,
      body: { total: 3, lines: [{ qty: 1, sku: 'a' }], order: 7 },
    });
    expect(again, String(again)).toBeUndefined();
    // Still a conflict: another value, array order, or a string body whose bytes differ.
    for (const body of [
      { total: 4, lines: [{ qty: 1, sku: 'a' }], order: 7 },
      { order: 7, lines: [{ sku: 'a', qty: 1 }], total: 3, extra: true },
      '{"total":3,"lines":[{"qty":1,"sku":"a"}],"order":7}',
    ]) {
      const error = await writeError(store, { ...valid, body });
      expect(isOncelyError(error, 'OUTBOX_ID_CONFLICT'), `${JSON.stringify(body)}: ${String(error)}`).toBe(
        true,
      );
    }
    expect(await ids(store)).toEqual(['m-1']);
  });

  it('an ArrayBuffer or DataView body is sent as its bytes', async () => {
    const store = await openStore();
    const bytes = Uint8Array.from([7, 0, 255, 1]);
    await store.transaction(async (tx) => {
      // Keyed: an unkeyed row waits for the cluster-wide snapshot xmin, which another suite's
      // open transaction on the shared server can hold back past the test's timeout.
      await publishInTransaction(store, tx, 'q', bytes.buffer, { id: 'buffer', key: 'buffer' });
      await publishInTransaction(store, tx, 'q', new DataView(bytes.buffer, 1, 2), {
        id: 'view',
        key: 'view',
      });
    });
    const sent: OutboxMessage[] = [];
    const producer: OutboxProducer = {
      async send(messages): Promise<OutboxSendResult[]> {
        sent.push(...messages);
        return messages.map(() => ({ ok: true }));
      },
    };
    const relay = createRelay({ store, producers: producer, listen: false });
    for (let round = 0; round < 7_500 && sent.length < 2; round++) {
      if ((await relay.runOnce()).claimed === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(sent.map((m) => `${m.id}=${Array.from(m.body).join(',')}`)).toEqual([
      'buffer=7,0,255,1',
      'view=0,255',
    ]);
  });
});
