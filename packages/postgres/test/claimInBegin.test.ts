import { processBatchOnce, processOnce } from '@oncely/core';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { inlineLiterals } from '../src/drivers/inlineLiterals.js';
import type { PgPoolLike } from '../src/index.js';
import { PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

/**
 * The single-message claim travels in BEGIN's simple-protocol message with its
 * parameters written as literals (PgDriver.open). These are the injection tests for that
 * path: message IDs and consumer names built to break out of a literal must come back
 * byte for byte, on both settings of standard_conforming_strings.
 */
const HOSTILE = [
  "o'k",
  "''",
  'a\\b',
  'trailing\\',
  "\\'; DROP TABLE payments; --",
  "'); DELETE FROM processed_messages; --",
  "E'x'",
  '$2',
  '$1 $2 $3',
  '$$ dollar $$',
  'line\nbreak\ttab',
  'ünïcødé 💥',
  '\\\\',
  "\\x27'",
];

describe('inlineLiterals', () => {
  it('writes strings as literals, doubling quotes and using E-strings for backslashes', () => {
    expect(inlineLiterals('VALUES ($1, $2)', ["o'k", 'a\\b'])).toBe("VALUES ('o''k', E'a\\\\b')");
  });

  it('never re-reads a literal: a value holding "$2" stays that value', () => {
    expect(inlineLiterals('VALUES ($1, $2)', ['$2', 'x'])).toBe("VALUES ('$2', 'x')");
  });

  it('fills every occurrence of a placeholder, and $10 is not $1 followed by 0', () => {
    expect(inlineLiterals('$1 = $1 AND $2', ['a', 'b'])).toBe("'a' = 'a' AND 'b'");
    const ten = Array.from({ length: 10 }, (_, i) => `p${i + 1}`);
    expect(inlineLiterals('$10, $1', ten)).toBe("'p10', 'p1'");
  });

  it('writes string arrays as text[] and refuses what it cannot write', () => {
    expect(inlineLiterals('unnest($1::text[])', [['a', "b'"]])).toBe(
      "unnest((ARRAY['a', 'b''']::text[])::text[])",
    );
    expect(inlineLiterals('VALUES ($1)', [1])).toBeUndefined();
    expect(inlineLiterals('VALUES ($1)', [null])).toBeUndefined();
    expect(inlineLiterals('VALUES ($1)', [['a', 2]])).toBeUndefined();
    expect(inlineLiterals('VALUES ($1)', ['nul\0byte'])).toBeUndefined();
    expect(inlineLiterals('VALUES ($1, $2)', ['only one'])).toBeUndefined();
  });
});

const { schemas, pools } = cleanupAfterFile();

/** A store on a caller pool whose statements are recorded, with an effects table beside it. */
async function recordedStore(sessionOptions?: string) {
  const schema = uniqueSchema('claim_begin');
  schemas.push(schema);
  const pool = new pg.Pool({
    connectionString,
    max: 2,
    ...(sessionOptions ? { options: sessionOptions } : {}),
  });
  pools.push(pool);
  const sent: string[] = [];
  /** The pool's own clients, behind the wrapper each checkout gets. */
  const clients = new Set<pg.PoolClient>();
  const recording: PgPoolLike = {
    async connect() {
      const client = await pool.connect();
      clients.add(client);
      const query = client.query.bind(client) as (text: string, values?: unknown[]) => Promise<unknown>;
      return Object.assign(Object.create(client) as pg.PoolClient, {
        query: (text: string, values?: unknown[]) => {
          sent.push(text);
          return query(text, values);
        },
        release: (destroy?: Error | boolean) => client.release(destroy),
        on: client.on.bind(client),
        removeListener: client.removeListener.bind(client),
      }) as never;
    },
    on: (event, listener) => pool.on(event, listener),
    removeListener: (event, listener) => pool.removeListener(event, listener),
    end: () => pool.end(),
  };
  const store = new PostgresStore({ pool: recording, schema });
  await store.migrate();
  await admin.query(`CREATE TABLE "${schema}".payments (message_id text NOT NULL)`);
  return { store, schema, sent, clients };
}

describe.skipIf(!hasPostgres)('the claim in BEGIN’s round trip', () => {
  it('processOnce sends BEGIN and the claim as one message, then the work, then COMMIT', async () => {
    const { store, schema, sent } = await recordedStore();
    await processOnce(store, { consumer: 'c', messageId: 'warm-up' }, async () => {});
    sent.length = 0;
    const insert = `INSERT INTO "${schema}".payments (message_id) VALUES ($1)`;
    const outcome = await processOnce(store, { consumer: 'c', messageId: 'm-1' }, (tx) =>
      tx.query(insert, ['m-1']),
    );
    expect(outcome.status).toBe('processed');
    expect(sent).toHaveLength(3);
    expect(sent[0]).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED;.*INSERT INTO .*processed_messages/s);
    expect(sent[0]).toContain("VALUES ('c', 'm-1', 'completed')");
    expect(sent.slice(1)).toEqual([insert, 'COMMIT']);
  });

  for (const [label, sessionOptions] of [
    ['standard_conforming_strings on', undefined],
    ['standard_conforming_strings off', '-c standard_conforming_strings=off'],
  ] as const) {
    it(`hostile message IDs and consumer names come back byte for byte (${label})`, async () => {
      const { store, schema } = await recordedStore(sessionOptions);
      const insert = `INSERT INTO "${schema}".payments (message_id) VALUES ($1)`;
      for (const [i, id] of HOSTILE.entries()) {
        const consumer = HOSTILE[(i + 3) % HOSTILE.length]!;
        const first = await processOnce(store, { consumer, messageId: id }, (tx) => tx.query(insert, [id]));
        expect(first.status).toBe('processed');
        const again = await processOnce(store, { consumer, messageId: id }, (tx) => tx.query(insert, [id]));
        expect(again.status).toBe('duplicate');
        const { rows } = await admin.query<{ consumer: string; message_id: string }>(
          `SELECT consumer, message_id FROM "${schema}".processed_messages WHERE consumer = $1 AND message_id = $2`,
          [consumer, id],
        );
        expect(rows).toEqual([{ consumer, message_id: id }]);
      }
      // The batch claim (unnest over a text[] literal) with the same IDs, under a new consumer.
      const results = await processBatchOnce(
        store,
        "batch'\\",
        HOSTILE.map((id) => ({ messageId: id, work: (tx) => tx.query(insert, [id]) })),
      );
      expect(results.map((r) => r.status)).toEqual(HOSTILE.map(() => 'processed'));
      const markers = await admin.query<{ message_id: string }>(
        `SELECT message_id FROM "${schema}".processed_messages WHERE consumer = $1`,
        ["batch'\\"],
      );
      expect(markers.rows.map((r) => r.message_id).sort()).toEqual([...HOSTILE].sort());
      const effects = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".payments`);
      expect(effects.rows[0]!.n).toBe(HOSTILE.length * 2);
    });
  }

  // Kafka's offsets mode: the conditional offset upsert is that mode's claim, the first
  // statement of every record's transaction, and travels with BEGIN the same way.
  it('offsets.advance travels with BEGIN, keeps hostile names byte for byte, and stays conditional', async () => {
    const { store, schema, sent } = await recordedStore();
    const advance = (consumer: string, topic: string, offset: string) =>
      store.transaction((tx) => store.offsets.advance(tx, consumer, topic, 3, offset));
    await advance('warm-up', 'warm-up', '0');
    sent.length = 0;
    expect(await advance('c', 'orders', '41')).toBe(true);
    expect(sent).toHaveLength(2);
    expect(sent[0]).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED;.*INSERT INTO .*offsets/s);
    expect(sent[1]).toBe('COMMIT');
    // Not past a later offset already stored: the record is a replay.
    expect(await advance('c', 'orders', '40')).toBe(false);
    expect(await advance('c', 'orders', '42')).toBe(true);
    for (const [i, name] of HOSTILE.entries()) {
      const topic = HOSTILE[(i + 1) % HOSTILE.length]!;
      expect(await advance(name, topic, '9007199254740993')).toBe(true);
      const { rows } = await admin.query<{ next_offset: string }>(
        `SELECT next_offset::text FROM "${schema}".offsets WHERE consumer = $1 AND topic = $2 AND partition = 3`,
        [name, topic],
      );
      expect(rows).toEqual([{ next_offset: '9007199254740994' }]);
    }
  });

  it('a message ID holding NUL is refused by the server on the parameterized path, nothing kept', async () => {
    const { store, schema, sent } = await recordedStore();
    await processOnce(store, { consumer: 'c', messageId: 'warm-up' }, async () => {});
    sent.length = 0;
    await expect(
      processOnce(store, { consumer: 'c', messageId: 'a\0b' }, async () => {}),
    ).rejects.toMatchObject({
      code: '22021',
    });
    // Not inlined: BEGIN went alone, the claim with its parameters after it.
    expect(sent[0]).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED;[^I]*$/);
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".processed_messages WHERE message_id <> 'warm-up'`,
    );
    expect(rows[0]!.n).toBe(0);
  });
});

describe.skipIf(!hasPostgres)('a caller pool that wraps its clients', () => {
  it('does not pile the store’s listeners onto the real client, one pair per transaction', async () => {
    // This recording pool hands out a new wrapper around the same client at every checkout,
    // as instrumentation may. Listeners attached for a client's life, keyed by the object
    // handed out, were attached again at every checkout: two more per transaction on the
    // real client, for as long as it lives (and Node's leak warning past 10).
    const { store, clients } = await recordedStore();
    const baseline = () =>
      [...clients].map((client) => client.listenerCount('error') + client.listenerCount('end'));
    await processOnce(store, { consumer: 'c', messageId: 'listeners-warm-up' }, async () => {});
    const before = Math.max(...baseline());
    for (let i = 0; i < 30; i++) {
      await processOnce(store, { consumer: 'c', messageId: `listeners-${i}` }, async () => {});
    }
    expect(Math.max(...baseline()), 'error + end listeners on a pooled client after 30 transactions').toBe(
      before,
    );
  });
});
