/**
 * Transactional claims: a marker written with the work in one transaction, consulted on
 * redelivery, rolled back with a failed handler, and namespaced per consumer.
 */
import { processOnce, type SqlClient } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { RollbackProbe, type StoreCases } from './testEnv.js';

/** The `transactional claims` cases. */
export function transactionalClaimCases({ withStore, timeout }: StoreCases): void {
  describe('transactional claims', () => {
    // Catches: a marker that is not written, or not consulted, so a redelivery runs again.
    it(
      'processOnce applies the work once; the second call is a duplicate',
      () =>
        withStore(async (env) => {
          const effects = await env.effectsTable();
          const key = env.key('once');
          let calls = 0;
          const work = async (tx: SqlClient) => {
            calls++;
            await effects.insert(tx, key.messageId);
            return 'done';
          };
          expect(await processOnce(env.store, key, work)).toEqual({ status: 'processed', result: 'done' });
          expect(await processOnce(env.store, key, work)).toEqual({ status: 'duplicate' });
          expect(calls).toBe(1);
          expect(await effects.count(key.messageId)).toBe(1);
        }),
      timeout,
    );

    // Catches: markers written outside the handler's transaction (they would survive the
    // rollback), and claims that neither de-duplicate nor report only new IDs.
    it(
      'claims commit and roll back with their transaction and report only new IDs',
      () =>
        withStore(async (env) => {
          const effects = await env.effectsTable();
          const consumer = env.consumer('claims');
          await expect(
            env.store.transaction(async (tx) => {
              const claimed = await env.store.claim(tx, consumer, ['b', 'a', 'a', 'c']);
              expect([...claimed].sort()).toEqual(['a', 'b', 'c']);
              for (const id of claimed) await effects.insert(tx, id);
              throw new RollbackProbe();
            }),
          ).rejects.toBeInstanceOf(RollbackProbe);
          expect(await effects.total()).toBe(0);
          expect(await env.unclaimed(consumer, ['a', 'b', 'c'])).toEqual(['a', 'b', 'c']);

          const first = await env.store.transaction(async (tx) => {
            const claimed = await env.store.claim(tx, consumer, ['a', 'b']);
            for (const id of claimed) await effects.insert(tx, id);
            return claimed;
          });
          expect([...first].sort()).toEqual(['a', 'b']);
          const second = await env.store.transaction((tx) =>
            env.store.claim(tx, consumer, ['b', 'c', 'c', 'a']),
          );
          expect([...second]).toEqual(['c']);
          expect(await env.store.transaction((tx) => env.store.claim(tx, consumer, []))).toEqual(new Set());
          expect(await effects.total()).toBe(2);
        }),
      timeout,
    );

    // Catches: a failure that keeps the marker (the retry would be skipped: a lost
    // message) or keeps the effect (the retry would apply it twice).
    it(
      'a handler that throws leaves neither marker nor effect, and the retry applies once',
      () =>
        withStore(async (env) => {
          const effects = await env.effectsTable();
          const key = env.key('fails-first');
          const failure = new Error('handler failed');
          await expect(
            processOnce(env.store, key, async (tx) => {
              await effects.insert(tx, key.messageId);
              throw failure;
            }),
          ).rejects.toBe(failure);
          expect(await effects.count(key.messageId)).toBe(0);
          expect(await env.unclaimed(key.consumer, [key.messageId])).toEqual([key.messageId]);

          const retry = await processOnce(env.store, key, async (tx) => {
            await effects.insert(tx, key.messageId);
          });
          expect(retry.status).toBe('processed');
          expect(await effects.count(key.messageId)).toBe(1);
          expect(await processOnce(env.store, key, async () => {})).toEqual({ status: 'duplicate' });
        }),
      timeout,
    );

    // Catches: a savepoint that rolls back the whole transaction, or none of it.
    it(
      'a savepoint rolls back only its own writes',
      () =>
        withStore(async (env) => {
          const effects = await env.effectsTable();
          const consumer = env.consumer('savepoints');
          await env.store.transaction(async (tx) => {
            await env.store.claim(tx, consumer, ['kept']);
            await effects.insert(tx, 'kept');
            await expect(
              env.store.savepoint(tx, async () => {
                await env.store.claim(tx, consumer, ['undone']);
                await effects.insert(tx, 'undone');
                throw new RollbackProbe();
              }),
            ).rejects.toBeInstanceOf(RollbackProbe);
            expect(await env.store.savepoint(tx, async () => 'value')).toBe('value');
          });
          expect(await effects.count('kept')).toBe(1);
          expect(await effects.count('undone')).toBe(0);
          expect(await env.unclaimed(consumer, ['kept', 'undone'])).toEqual(['undone']);
        }),
      timeout,
    );

    // Catches: markers keyed on the message ID alone, so two consumers of one message
    // (two services) would skip each other's work.
    it(
      'processed IDs are namespaced per consumer',
      () =>
        withStore(async (env) => {
          const effects = await env.effectsTable();
          const billing = env.key('same-id', 'billing');
          const shipping = { consumer: env.consumer('shipping'), messageId: billing.messageId };
          const work = (tx: SqlClient) => effects.insert(tx, billing.messageId);
          expect((await processOnce(env.store, billing, work)).status).toBe('processed');
          expect((await processOnce(env.store, shipping, work)).status).toBe('processed');
          expect((await processOnce(env.store, billing, work)).status).toBe('duplicate');
          expect((await processOnce(env.store, shipping, work)).status).toBe('duplicate');
          expect(await effects.count(billing.messageId)).toBe(2);
        }),
      timeout,
    );

    // Catches: an attempt counter shared across keys or consumers, or not incremented.
    it(
      'recordAttempt counts deliveries per consumer and message',
      () =>
        withStore(async (env) => {
          const key = env.key('counted');
          expect(await env.store.recordAttempt(key)).toBe(1);
          expect(await env.store.recordAttempt(key)).toBe(2);
          expect(await env.store.recordAttempt(key)).toBe(3);
          expect(await env.store.recordAttempt({ ...key, messageId: `${key.messageId}-other` })).toBe(1);
          expect(await env.store.recordAttempt({ ...key, consumer: env.consumer('other') })).toBe(1);
        }),
      timeout,
    );

    // Catches: a run counted twice when its count is sent again (its commit landed, its
    // answer was lost, the consumer waited out the outage and sent it again): the message
    // then reaches maxAttempts, and the dead-letter queue, a run early. And a take-back
    // that removes another run's count (a run released before its count landed).
    it(
      'recordAttempt counts a run once however often it is sent; forgetAttempt takes back only that run',
      () =>
        withStore(async (env) => {
          const key = env.key('run-token');
          expect(await env.store.recordAttempt(key, 'run-1')).toBe(1);
          expect(await env.store.recordAttempt(key, 'run-1')).toBe(1);
          expect(await env.store.recordAttempt(key, 'run-2')).toBe(2);
          // run-1 is not the last run counted: its take-back changes nothing.
          await env.store.forgetAttempt(key, 'run-1');
          expect(await env.store.recordAttempt(key, 'run-3')).toBe(3);
          await env.store.forgetAttempt(key, 'run-3');
          // Sent again (its answer lost): taken back once.
          await env.store.forgetAttempt(key, 'run-3');
          expect(await env.store.recordAttempt(key, 'run-4')).toBe(3);
          // Without a run, every call counts.
          expect(await env.store.recordAttempt(key)).toBe(4);
          expect(await env.store.recordAttempt(key)).toBe(5);
        }),
      timeout,
    );

    // Catches: classification by message text or not at all (a deadlock dead-lettered,
    // a constraint violation retried forever).
    it(
      'classifyError reads SQLSTATEs of real database errors',
      () =>
        withStore(async (env) => {
          const raise = (kind: 'serialization' | 'deadlock' | 'lockTimeout') =>
            env.store.transaction((tx) => tx.query(env.sql.raise(kind)));
          for (const kind of ['serialization', 'deadlock', 'lockTimeout'] as const) {
            expect(env.store.classifyError(await rejection(raise(kind))), kind).toBe('transient');
          }
          const effects = await env.effectsTable({ unique: true });
          const duplicateKey = await rejection(
            env.store.transaction(async (tx) => {
              await effects.insert(tx, 'twice');
              await effects.insert(tx, 'twice');
            }),
          );
          expect(env.sql.isUniqueViolation(duplicateKey), 'a unique-key violation').toBe(true);
          expect(env.store.classifyError(duplicateKey)).toBe('other');
          expect(env.store.classifyError(new Error('Connection terminated unexpectedly'))).toBe('other');
        }),
      timeout,
    );

    // Catches: transient conflicts surfacing as handler failures (counted attempts,
    // dead letters) instead of being retried, or a retry that keeps the failed claim.
    it(
      'processOnce retries a serialization failure and applies the work once',
      () =>
        withStore(async (env) => {
          const effects = await env.effectsTable();
          const key = env.key('serialization');
          let calls = 0;
          const outcome = await processOnce(env.store, key, async (tx) => {
            calls++;
            await effects.insert(tx, key.messageId);
            if (calls === 1) {
              await tx.query(env.sql.raise('serialization'));
            }
            return calls;
          });
          expect(outcome).toEqual({ status: 'processed', result: 2 });
          expect(await effects.count(key.messageId)).toBe(1);
        }),
      timeout,
    );
  });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the operation to fail');
}
