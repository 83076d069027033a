/**
 * Racing transactions: two stores on separate pools claiming the same IDs, a claim that
 * waits on an uncommitted one, and lock timeouts retried by `processOnce`.
 */
import { type IdempotencyStore, processOnce, type SqlClient } from '@oncely/core';
import { describe, expect } from 'vitest';
import { RollbackProbe, type StoreCases, type TestEnv } from './testEnv.js';

/** The `racing transactions` cases (skipped on a single-connection store). */
export function racingTransactionCases({ racingCase }: StoreCases): void {
  describe('racing transactions', () => {
    // Catches: a dedup check outside the transaction (check-then-insert), which lets two
    // consumers both see "not processed" and both apply the effect.
    racingCase(
      'two stores on separate pools racing the same 50 IDs apply each effect exactly once',
      async (env) => {
        const effects = await env.effectsTable();
        const other = await env.sibling();
        const consumer = env.consumer('race');
        const ids = Array.from({ length: 50 }, (_, i) => `race-${String(i).padStart(2, '0')}`);
        const outcomes = { processed: 0, duplicate: 0 };
        const race = (store: IdempotencyStore<SqlClient>, order: string[]) =>
          Promise.all(
            order.map(async (messageId) => {
              const outcome = await processOnce(store, { consumer, messageId }, async (tx) => {
                await effects.insert(tx, messageId);
                // Hold the marker briefly so the other side really meets an open transaction.
                await tx.query(env.sql.sleep(0.005));
              });
              outcomes[outcome.status]++;
            }),
          );
        await Promise.all([race(env.store, ids), race(other, [...ids].reverse())]);
        expect(outcomes).toEqual({ processed: 50, duplicate: 50 });
        const perId = await effects.perId();
        expect(perId.size).toBe(50);
        for (const id of ids) expect(perId.get(id), id).toBe(1);
      },
    );

    // Catches: claims that do not wait for the open transaction holding the ID (a
    // rollback would lose the message; a commit would be applied twice).
    racingCase('a claim waits for the open transaction holding the ID: commit ⇒ duplicate', async (env) => {
      const other = await env.sibling();
      expect(await waitingClaim(env, other, 'commit')).toEqual([]);
    });

    racingCase('a claim waits for the open transaction holding the ID: rollback ⇒ claimed', async (env) => {
      const other = await env.sibling();
      const consumerIds = await waitingClaim(env, other, 'rollback');
      expect(consumerIds).toEqual(['held']);
    });

    // Catches: lock timeouts (55P03) not retried by processOnce.
    racingCase('processOnce retries a lock timeout and applies the work once', async (env) => {
      const effects = await env.effectsTable();
      const locks = await env.effectsTable({ unique: true });
      await env.store.transaction((tx) => locks.insert(tx, 'contended'));
      const other = await env.sibling();
      const locked = deferred();
      const release = deferred();
      const holder = env.store.transaction(async (tx) => {
        await tx.query(`SELECT 1 FROM ${locks.name} WHERE message_id = 'contended' FOR UPDATE`);
        locked.resolve();
        await release.promise;
      });
      await locked.promise;
      const key = env.key('lock-timeout');
      let calls = 0;
      const outcome = await processOnce(other, key, async (tx) => {
        calls++;
        if (calls === 2) release.resolve();
        await tx.query(env.sql.shortLockTimeout);
        await tx.query(`SELECT 1 FROM ${locks.name} WHERE message_id = 'contended' FOR UPDATE`);
        await effects.insert(tx, key.messageId);
      });
      release.resolve();
      await holder;
      expect(outcome.status).toBe('processed');
      expect(calls).toBeGreaterThanOrEqual(2);
      expect(await effects.count(key.messageId)).toBe(1);
    });
  });
}

/**
 * Transaction A claims an ID and holds it open; B claims the same ID from another store
 * and must still be waiting when checked; A then commits or rolls back. Returns what B claimed.
 */
async function waitingClaim(
  env: TestEnv,
  other: IdempotencyStore<SqlClient>,
  ending: 'commit' | 'rollback',
): Promise<string[]> {
  const consumer = env.consumer('waiting');
  const holding = deferred();
  const finish = deferred();
  const holder = env.store
    .transaction(async (tx) => {
      await env.store.claim(tx, consumer, ['held']);
      holding.resolve();
      await finish.promise;
      if (ending === 'rollback') throw new RollbackProbe();
    })
    .catch((error: unknown) => {
      if (!(error instanceof RollbackProbe)) throw error;
    });
  await holding.promise;
  const waiter = other.transaction(async (tx) => [...(await other.claim(tx, consumer, ['held']))]);
  // Not a synchronisation sleep: B must still be blocked on A's open transaction.
  const early = await Promise.race([
    waiter.then(() => 'settled' as const),
    new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), 200)),
  ]);
  expect(early).toBe('pending');
  finish.resolve();
  await holder;
  return waiter;
}

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
