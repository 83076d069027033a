/**
 * The relay's start() and stop() called concurrently (#26, D2 and D3). Before the fix two
 * concurrent start() calls both passed the "already started" check (it ran before two
 * awaits) and each took a LISTEN connection, one leaked; a stop() during start() left the
 * relay "already started" with nothing running, a committed row pending, and the LISTEN
 * connection checked out, so store.close() never returned.
 */
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { isOncelyError, publishInTransaction } from '@oncely/core';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, pools } = cleanupAfterFile();
/** A hang guard, not a speed check. */
const HANG_MS = 60_000;

class Recorder implements OutboxProducer {
  readonly sent: OutboxMessage[] = [];
  private waiters: Array<() => void> = [];
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    this.sent.push(...messages);
    for (const wake of this.waiters.splice(0)) wake();
    return messages.map(() => ({ ok: true }));
  }
  async until(count: number): Promise<void> {
    const deadline = Date.now() + HANG_MS * 2;
    while (this.sent.length < count) {
      if (Date.now() > deadline) throw new Error(`only ${this.sent.length} of ${count} sent`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
  }
}

/** Rejects with `what` when `promise` has not settled within the hang guard. */
function guarded<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not return within ${HANG_MS / 1000} s`)), HANG_MS);
  });
  return Promise.race([promise, hang]).finally(() => clearTimeout(timer));
}

async function setup() {
  const schema = uniqueSchema('relay_life');
  schemas.push(schema);
  const pool = new pg.Pool({ connectionString, max: 4 });
  pools.push(pool);
  const store = new PostgresStore({ pool, schema });
  await store.migrate();
  return { pool, store };
}

/** Connections checked out of the pool (a LISTEN connection is one until released). */
function checkedOut(pool: pg.Pool): number {
  return pool.totalCount - pool.idleCount;
}

describe.skipIf(!hasPostgres)('relay start() and stop() called concurrently', { timeout: 300_000 }, () => {
  it('a second concurrent start() is refused clearly and nothing leaks', async () => {
    const { pool, store } = await setup();
    const producer = new Recorder();
    const relay = createRelay({ store, producers: producer, pollIntervalMs: 200 });
    onTestFinished(() => relay.stop());
    const outcomes = await Promise.allSettled([relay.start(), relay.start()]);
    expect(outcomes.map((o) => o.status).sort()).toEqual(['fulfilled', 'rejected']);
    const refusal = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult;
    expect(isOncelyError(refusal.reason) && refusal.reason.code).toBe('CONFIG_INVALID');
    expect(String(refusal.reason.message)).toMatch(/already start/);
    // The relay that did start works.
    await store.transaction((tx) =>
      publishInTransaction(store, tx, 'q', { n: 1 }, { id: 'one', key: 'one' }),
    );
    await producer.until(1);
    await guarded(relay.stop(), 'relay.stop()');
    expect(checkedOut(pool), 'pool connections still checked out after stop()').toBe(0);
  });

  it('stop() during start() stops cleanly; start() afterwards works; nothing leaks', async () => {
    const { pool, store } = await setup();
    const producer = new Recorder();
    const relay = createRelay({ store, producers: producer, pollIntervalMs: 200 });
    onTestFinished(() => relay.stop());
    const starting = relay.start();
    const stopping = relay.stop();
    await guarded(Promise.allSettled([starting, stopping]), 'start() with a stop() during it');
    await expect(stopping).resolves.toBeUndefined();
    expect(checkedOut(pool), 'pool connections still checked out after stop()').toBe(0);
    // Usable again: a committed row is sent after a new start().
    await guarded(relay.start(), 'relay.start() after stop()');
    await store.transaction((tx) =>
      publishInTransaction(store, tx, 'q', { n: 1 }, { id: 'after-stop', key: 'after-stop' }),
    );
    await producer.until(1);
    expect(producer.sent.map((m) => m.id)).toEqual(['after-stop']);
    await guarded(relay.stop(), 'relay.stop()');
    expect(checkedOut(pool), 'pool connections still checked out after the second stop()').toBe(0);
    await guarded(store.close(), 'store.close()');
  });

  it("a producer whose send() resolves to no results fails its own rows, clearly; other producers' rows are sent", async () => {
    const { store } = await setup();
    const good = new Recorder();
    const broken: OutboxProducer = {
      // A custom producer with a bug: it sent, but forgot to return the results.
      async send() {
        return undefined as unknown as OutboxSendResult[];
      },
    };
    const relay = createRelay({ store, listen: false, producers: { good, broken } });
    await store.transaction(async (tx) => {
      await publishInTransaction(store, tx, 'good', { n: 1 }, { id: 'g-1', key: 'g' });
      await publishInTransaction(store, tx, 'broken', { n: 2 }, { id: 'b-1', key: 'b' });
    });
    // Before: the round threw "Cannot read properties of undefined (reading '0')" and rolled
    // back, so the good row, already sent, was sent again every round, and the broken row
    // never counted an attempt nor was dead-lettered.
    const round = await relay.runOnce();
    expect(round).toMatchObject({ claimed: 2, sent: 1, failed: 1 });
    expect(good.sent.map((m) => m.id)).toEqual(['g-1']);
    const [stuck] = await store.outbox.stuck();
    expect(stuck).toMatchObject({ id: 'b-1', status: 'pending', attempts: 1 });
    expect(stuck?.lastError).toContain('must resolve to an array');
    // A result that is not { ok: boolean } counts as a failure with a reason, too.
    const odd: OutboxProducer = { send: async (messages) => messages.map(() => true as never) };
    const oddRelay = createRelay({ store, listen: false, producers: { good, broken: odd } });
    await store.outbox.retry();
    await store.transaction((tx) => tx.query(`UPDATE "${store.schema}".outbox SET next_attempt_at = NULL`));
    expect(await oddRelay.runOnce()).toMatchObject({ sent: 0, failed: 1 });
    expect((await store.outbox.stuck())[0]?.lastError).toContain('not a result');
  });
});
