/**
 * Many failing keys, each with ≥ batchSize rows behind its head, must not stall healthy
 * rows (#26, D1). Before the fix a claim took a due failing head's whole backlog up to
 * batchSize; the relay could send only the head, so the round was spent on one failing
 * row. With the heads due again by the next round (a 1 ms backoff here, a 200 ms one in
 * the review's repro, where a round took longer than the backoff) no healthy row was ever
 * claimed. Counts only: rounds and attempts, never elapsed time.
 */
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { publishInTransaction } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, stores } = cleanupAfterFile();
const BATCH = 10;
const ROWS_PER_FAILING_KEY = 30;
const HEALTHY = 200;
/** A hang guard on the rounds one test may run, far above what the fix needs. */
const MAX_ROUNDS = 400;

class FailingKeysProducer implements OutboxProducer {
  readonly healthy: OutboxMessage[] = [];
  /** Every failing-key message the relay handed over, in order. */
  readonly failingSends: OutboxMessage[] = [];
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    return messages.map((message) => {
      if (message.key !== undefined) {
        this.failingSends.push(message);
        return { ok: false, error: new Error(`key ${message.key} is broken`) };
      }
      this.healthy.push(message);
      return { ok: true };
    });
  }
}

async function settled(schema: string): Promise<void> {
  for (let i = 0; i < 7_500; i++) {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE xid >= pg_snapshot_xmin(pg_current_snapshot())`,
    );
    if (rows[0]!.n === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('outbox rows stayed above the snapshot xmin');
}

/** A store with `failingKeys` keys of 30 rows each, then the healthy unkeyed rows. */
async function seeded(failingKeys: number): Promise<PostgresStore> {
  const schema = uniqueSchema('outbox_fk');
  schemas.push(schema);
  const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
  stores.push(store);
  await store.migrate();
  // The failing keys' rows first, each key's rows together, so in (xid, position)
  // order they come before every healthy row and a key's backlog fills a claim.
  await store.transaction(async (tx) => {
    for (let key = 0; key < failingKeys; key++)
      for (let row = 0; row < ROWS_PER_FAILING_KEY; row++)
        await publishInTransaction(store, tx, 'q', { key, row }, { id: `f${key}-${row}`, key: `F${key}` });
  });
  await store.transaction(async (tx) => {
    for (let i = 0; i < HEALTHY; i++) await publishInTransaction(store, tx, 'q', { i }, { id: `h-${i}` });
  });
  await settled(schema);
  return store;
}

describe.skipIf(!hasPostgres)('outbox relay with many failing keys', { timeout: 200_000 }, () => {
  for (const failingKeys of [25, 40]) {
    it(`${failingKeys} failing keys × ${ROWS_PER_FAILING_KEY} rows do not stall ${HEALTHY} healthy rows`, async () => {
      const store = await seeded(failingKeys);
      const producer = new FailingKeysProducer();
      // A 1 ms backoff: every failing head is due again by the next round, as with any
      // backoff shorter than a round under load.
      const relay = createRelay({
        store,
        producers: producer,
        listen: false,
        batchSize: BATCH,
        maxAttempts: 1_000_000,
        backoff: { initialMs: 1, maxMs: 1, jitter: 0 },
      });
      let rounds = 0;
      while (producer.healthy.length < HEALTHY && rounds < MAX_ROUNDS) {
        await relay.runOnce();
        rounds++;
      }
      expect(producer.healthy.length, `healthy rows sent in ${rounds} rounds`).toBe(HEALTHY);
      // Per-key order: only a failing key's head was ever handed to the producer.
      const notHeads = producer.failingSends.filter((message) => !message.id.endsWith('-0'));
      expect(notHeads.map((message) => message.id)).toEqual([]);
      // No round was spent on one key's backlog: at most one round per failing key went
      // to its first (untried) head, the rest to tried heads capped at half a round.
      expect(rounds, 'rounds to send every healthy row').toBeLessThanOrEqual(
        failingKeys + Math.ceil(HEALTHY / (BATCH / 2)) + 10,
      );
    });
  }
  it('a started relay with a 200 ms backoff sends every healthy row while 25 keys fail (counted in attempts)', async () => {
    const failingKeys = 25;
    const store = await seeded(failingKeys);
    const producer = new FailingKeysProducer();
    const relay = createRelay({
      store,
      producers: producer,
      batchSize: BATCH,
      pollIntervalMs: 50,
      maxAttempts: 1_000_000,
      backoff: { initialMs: 200, maxMs: 200, jitter: 0 },
    });
    // Every round gives at least half its room to other rows, so the healthy rows need
    // at most ~40 rounds after the failing keys' first ones, and a round tries at most
    // half a round of failing heads: the failing sends stay under this bound (before the
    // fix each round went to one failing key and 0 of 200 healthy rows went out in 8 s).
    const failingSendsBound = (failingKeys + Math.ceil(HEALTHY / (BATCH / 2)) + 10) * BATCH;
    await relay.start();
    try {
      // Stops at the count bound; the deadline is a hang guard only.
      const deadline = Date.now() + 150_000;
      while (
        producer.healthy.length < HEALTHY &&
        producer.failingSends.length <= failingSendsBound &&
        Date.now() < deadline
      ) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      await relay.stop();
    }
    expect(
      producer.healthy.length,
      `healthy rows sent by the time of ${producer.failingSends.length} failing-head sends`,
    ).toBe(HEALTHY);
    expect(producer.failingSends.length).toBeLessThanOrEqual(failingSendsBound);
    expect(producer.failingSends.filter((message) => !message.id.endsWith('-0'))).toEqual([]);
  });
});
