/**
 * A producer whose send() never settles (a broker that took the connection and never
 * confirms, a client without a request timeout) must not stall the relay (#26 review:
 * the round held its claim and its transaction for ever, every other destination's rows
 * with it, and stop() waited for that round). `sendTimeoutMs` fails that producer's rows
 * of the round as a transient failure; the other destinations' rows are sent and marked.
 */
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { publishInTransaction } from '@oncely/core';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, pools } = cleanupAfterFile();
/** A hang guard, not a speed check: far above the relay's send timeout of the test. */
const HANG_MS = 60_000;

/** Takes every message and never answers. */
class Silent implements OutboxProducer {
  calls = 0;
  send(): Promise<OutboxSendResult[]> {
    this.calls++;
    return new Promise(() => {});
  }
}

class Recorder implements OutboxProducer {
  readonly sent: OutboxMessage[] = [];
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    this.sent.push(...messages);
    return messages.map(() => ({ ok: true }));
  }
}

function guarded<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not return within ${HANG_MS / 1000} s`)), HANG_MS);
  });
  return Promise.race([promise, hang]).finally(() => clearTimeout(timer));
}

describe.skipIf(!hasPostgres)('a send that never settles', () => {
  it('fails that producer rows after sendTimeoutMs; the other destination is sent in the same round', async () => {
    const schema = uniqueSchema('relay_send_timeout');
    schemas.push(schema);
    const pool = new pg.Pool({ connectionString, max: 4 });
    pools.push(pool);
    const store = new PostgresStore({ pool, schema });
    await store.migrate();
    const silent = new Silent();
    const healthy = new Recorder();
    // A key per row: an unkeyed row waits until it is below the cluster-wide snapshot xmin,
    // so another suite's open transaction on the shared server (one holds its transaction
    // about 60 s by design) held the claim back past HANG_MS. Distinct keys put every row in
    // the round's first wave, as unkeyed rows were.
    await store.transaction(async (tx) => {
      for (let i = 0; i < 3; i++)
        await publishInTransaction(store, tx, 'stuck', { i }, { id: `stuck-${i}`, key: `stuck-${i}` });
      for (let i = 0; i < 5; i++)
        await publishInTransaction(store, tx, 'fine', { i }, { id: `fine-${i}`, key: `fine-${i}` });
    });
    const relay = createRelay({
      store,
      producers: { stuck: silent, fine: healthy },
      listen: false,
      sendTimeoutMs: 500,
      backoff: { initialMs: 60_000, maxMs: 60_000 },
      logger: { debug() {}, info() {}, warn() {}, error() {} },
    });
    // Rounds until the rows are claimed (a round can start before the writer's commit shows).
    const deadline = Date.now() + HANG_MS;
    let round = await guarded(relay.runOnce(), 'runOnce() with a producer that never answers');
    while (round.claimed === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      round = await guarded(relay.runOnce(), 'runOnce() with a producer that never answers');
    }
    expect(silent.calls).toBe(1);
    expect(healthy.sent.map((m) => m.id).sort()).toEqual(['fine-0', 'fine-1', 'fine-2', 'fine-3', 'fine-4']);
    expect(round).toMatchObject({ claimed: 8, sent: 5, failed: 3, deadLettered: 0 });
    const { rows } = await pool.query<{ id: string; status: string; last_error: string }>(
      `SELECT id, status, last_error FROM "${schema}".outbox WHERE destination = 'stuck' ORDER BY id`,
    );
    expect(rows.map((r) => r.status)).toEqual(['pending', 'pending', 'pending']);
    expect(rows[0]!.last_error).toMatch(/did not answer within 500 ms/);
  }, 180_000);

  it('refuses a sendTimeoutMs that is not a positive integer', () => {
    const store = new PostgresStore({ connectionString, schema: 'relay_send_timeout_never_used' });
    for (const sendTimeoutMs of [0, -1, 1.5, Number.NaN]) {
      expect(() => createRelay({ store, producers: new Recorder(), listen: false, sendTimeoutMs })).toThrow(
        /sendTimeoutMs/,
      );
    }
  });
});
