/**
 * store.close() while an outbox relay runs with LISTEN. Before the fix it never returned on
 * a store that owns its pool: the relay's LISTEN connection stays checked out of the pool
 * and pg's pool.end() waits for every checked-out client. On a pool of the caller's it
 * returned, but the relay kept its LISTEN connection and went on working. Now close() ends
 * the store's LISTEN connections and a running relay stops with one clear 'error'.
 */
import type { Logger, OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { isOncelyError, publishInTransaction } from '@oncely/core';
import { waitFor } from '@oncely/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createRelay, PostgresStore, type Relay } from '../src/index.js';
import { cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, pools } = cleanupAfterFile();
/** A hang guard, not a speed check. */
const HANG_MS = 20_000;

class Recorder implements OutboxProducer {
  readonly sent: OutboxMessage[] = [];
  private waiters: Array<() => void> = [];
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    this.sent.push(...messages);
    for (const wake of this.waiters.splice(0)) wake();
    return messages.map(() => ({ ok: true }));
  }
  until(count: number): Promise<void> {
    if (this.sent.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(() => void this.until(count).then(resolve)));
  }
}

/** Resolves with `promise`'s outcome, or 'hung' when it has not settled within HANG_MS. */
function settledOrHung<T>(promise: Promise<T>): Promise<'settled' | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), HANG_MS);
  });
  return Promise.race([promise.then(() => 'settled' as const), hung]).finally(() => clearTimeout(timer));
}

/** The relay's first 'error' event. */
function firstError(relay: Relay): Promise<unknown> {
  return new Promise((resolve) => relay.once('error', resolve));
}

function recordingLogger(): Logger & { warnings: string[]; errors: string[] } {
  const warnings: string[] = [];
  const errors: string[] = [];
  return {
    warnings,
    errors,
    debug() {},
    info() {},
    warn: (message) => void warnings.push(message),
    error: (message) => void errors.push(message),
  };
}

/** Backends of this test's schema that sit in LISTEN (the relay's wake-up connection). */
async function listeners(admin: pg.Pool, applicationName: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
    [applicationName],
  );
  return Number(rows[0]!.n);
}

async function runningRelay(store: PostgresStore) {
  await store.migrate();
  const producer = new Recorder();
  const logger = recordingLogger();
  const relay = createRelay({ store, producers: producer, pollIntervalMs: 200, logger });
  await relay.start();
  // A row sent proves the loop runs (the LISTEN is taken before the first round).
  await store.transaction((tx) =>
    publishInTransaction(store, tx, 'q', { n: 1 }, { id: 'before-close', key: 'before-close' }),
  );
  await producer.until(1);
  return { relay, logger };
}

function expectStoppedClearly(error: unknown, logger: { warnings: string[]; errors: string[] }) {
  expect(isOncelyError(error) && error.code).toBe('CONFIG_INVALID');
  expect(String((error as Error).message)).toMatch(/store was closed while the relay was running/);
  expect(logger.errors.filter((m) => /store was closed/.test(m))).toHaveLength(1);
  // No round ran on the closed store, so none failed and none was retried.
  expect(logger.warnings.filter((m) => /round failed/.test(m))).toEqual([]);
}

describe.skipIf(!hasPostgres)('store.close() while the relay runs with LISTEN', { timeout: 120_000 }, () => {
  it('on a pool the store owns: close() returns and the relay stops with one clear error', async () => {
    const schema = uniqueSchema('relay_close');
    schemas.push(schema);
    const applicationName = `oncely_${schema}`;
    const store = new PostgresStore({
      connectionString: `${connectionString}?application_name=${applicationName}`,
      schema,
    });
    const admin = new pg.Pool({ connectionString, max: 1 });
    pools.push(admin);
    const { relay, logger } = await runningRelay(store);
    expect(await listeners(admin, applicationName)).toBe(1);
    const stopped = firstError(relay);

    expect(await settledOrHung(store.close())).toBe('settled');
    expect(await settledOrHung(stopped)).toBe('settled');
    expectStoppedClearly(await stopped, logger);
    // The backend ends just after its client is destroyed: wait for it, bounded.
    await waitFor(async () => (await listeners(admin, applicationName)) === 0, {
      timeoutMs: HANG_MS,
      description: 'the LISTEN backend to end',
    });
    // stop() afterwards is harmless; start() on the closed store is refused clearly.
    expect(await settledOrHung(relay.stop())).toBe('settled');
    await expect(relay.start()).rejects.toThrow(/store is closed/);
  });

  it("on the caller's pool: close() releases the LISTEN connection and the relay stops", async () => {
    const schema = uniqueSchema('relay_close');
    schemas.push(schema);
    const pool = new pg.Pool({ connectionString, max: 4 });
    pools.push(pool);
    const store = new PostgresStore({ pool, schema });
    const { relay, logger } = await runningRelay(store);
    const stopped = firstError(relay);

    expect(await settledOrHung(store.close())).toBe('settled');
    expect(await settledOrHung(stopped)).toBe('settled');
    expectStoppedClearly(await stopped, logger);
    expect(await settledOrHung(relay.stop())).toBe('settled');
    // Nothing of the store's is left checked out of the caller's pool.
    expect(pool.totalCount - pool.idleCount).toBe(0);
  });
});
