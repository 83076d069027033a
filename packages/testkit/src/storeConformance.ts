import { randomUUID } from 'node:crypto';
import type { IdempotencyStore, LeaseClaim, MessageKey, SqlClient } from '@oncely/core';
import { processOnce } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { POSTGRES_DIALECT, type SqlDialect } from './sqlDialect.js';

/** One isolated store a conformance test runs against. */
export interface StoreUnderTest {
  /** The store, on its own schema (or database) that no other test uses. Migrated unless asked otherwise. */
  store: IdempotencyStore<SqlClient>;
  /**
   * Drops what the factory created. `passed` is false when the test failed: a factory may
   * then keep the schema as evidence.
   */
  cleanup(outcome?: { passed: boolean }): Promise<void>;
  /** The store runs several transactions at once (a real server). False for PGlite: racing cases are skipped. */
  concurrent: boolean;
  /**
   * Opens another store on the same database and schema with its own connections (a
   * second pool: another process, as far as the database can tell). Closed by the suite.
   * Without it, racing cases race on `store` alone.
   */
  sibling?(): Promise<IdempotencyStore<SqlClient>>;
  /**
   * Schema the suite creates its business tables in (dropped with it by `cleanup`).
   * Without it, tables get unique names in the default schema and the suite drops them.
   */
  schema?: string;
  /**
   * The SQL dialect of the store's transactions, for the suite's own tables and probes.
   * @default PostgreSQL's
   */
  sql?: SqlDialect;
}

/** What a conformance test asks of the factory. */
export interface StoreFactoryOptions {
  /** False: an empty schema, for the test of concurrent `migrate()`. @default true */
  migrated?: boolean;
}

/** Builds one isolated {@link StoreUnderTest}; called once per test. */
export type StoreFactory = (options?: StoreFactoryOptions) => Promise<StoreUnderTest>;

/** What the caller already knows about the store, so skipped cases show up as such in the report. */
export interface StoreConformanceOptions {
  /** Declares single-connection stores (PGlite) up front: racing cases become `it.skip` with the reason in the title. */
  concurrent?: boolean;
  /** Per-test timeout. @default 60000 */
  timeoutMs?: number;
}

/** Optional capabilities a store may have beyond {@link IdempotencyStore}; detected at run time. */
interface MigratingStore {
  migrate(): Promise<unknown>;
}
interface PruningStore {
  prune(options: { olderThan: Date | number; batchSize?: number; consumer?: string }): Promise<number>;
}

const SINGLE_CONNECTION = 'skipped: single-connection store (PGlite) runs one transaction at a time';

/**
 * The store conformance suite: every `IdempotencyStore` must pass it on each database it
 * supports (PostgreSQL and PGlite for `@oncely/postgres`). Each case creates its own
 * store through `createStore` and checks effects by counting rows written through the
 * transaction, never by counting handler calls alone.
 *
 * Each case notes the defect it catches. Racing cases need a store that runs several
 * transactions at once; on single-connection stores they are skipped with the reason in
 * the title.
 *
 * @example
 * ```ts
 * runStoreConformance('PostgreSQL', async (options) => {
 *   const schema = `t_${randomUUID().replaceAll('-', '')}`;
 *   const store = new PostgresStore({ connectionString, schema });
 *   if (options?.migrated !== false) await store.migrate();
 *   return {
 *     store,
 *     schema,
 *     concurrent: true,
 *     sibling: async () => new PostgresStore({ connectionString, schema }),
 *     cleanup: async () => { await dropSchema(schema); await store.close(); },
 *   };
 * });
 * ```
 */
export function runStoreConformance(
  name: string,
  createStore: StoreFactory,
  options: StoreConformanceOptions = {},
): void {
  const timeout = options.timeoutMs ?? 60_000;
  const racing = options.concurrent === false ? it.skip : it;
  const racingTitle = (title: string): string =>
    options.concurrent === false ? `${title} — ${SINGLE_CONNECTION}` : title;

  /** Runs one case on a fresh store and always cleans up (reporting whether it passed). */
  const withStore = async (
    body: (env: TestEnv) => Promise<void>,
    factoryOptions?: StoreFactoryOptions,
  ): Promise<void> => {
    const under = await createStore(factoryOptions);
    const env = new TestEnv(under);
    let passed = false;
    try {
      await body(env);
      passed = true;
    } finally {
      await env.close(passed);
    }
  };

  /** A racing case: skipped at run time too when the factory reports a single-connection store. */
  const racingCase = (title: string, body: (env: TestEnv) => Promise<void>): void => {
    racing(
      racingTitle(title),
      async (ctx) => {
        await withStore(async (env) => {
          if (!env.under.concurrent) ctx.skip(SINGLE_CONNECTION);
          await body(env);
        });
      },
      timeout,
    );
  };

  describe(`store conformance: ${name}`, () => {
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

    describe('leased mode', () => {
      // Catches: a second acquire while the first claim lives (two runners of long work).
      it(
        'a live in-progress claim is busy for everyone else',
        () =>
          withStore(async (env) => {
            const key = env.key('live');
            const first = acquired(await env.store.acquireLease(key, 30_000));
            expect(first.takeover).toBe(false);
            expect(first.lockedUntil.getTime()).toBeGreaterThan(Date.now() + 10_000);
            const second = await env.store.acquireLease(key, 30_000);
            expect(second.status).toBe('busy');
            // The busy deadline is on this process's clock (the database's time left added
            // to our now): within the same server, it agrees with the claim's own deadline
            // up to the time between the two calls.
            if (second.status === 'busy') {
              expect(Math.abs(second.lockedUntil.getTime() - first.lockedUntil.getTime())).toBeLessThan(
                2_000,
              );
            }
          }),
        timeout,
      );

      // Catches: expired claims never taken over (a crashed runner blocks the message
      // forever), and stale owners that can still complete, renew or release.
      it(
        'an expired claim is taken over with a new owner; the stale owner can no longer complete',
        () =>
          withStore(async (env) => {
            const key = env.key('expiring');
            const stale = acquired(await env.store.acquireLease(key, 300));
            const fresh = await eventually(async () => {
              const claim = await env.store.acquireLease(key, 30_000);
              return claim.status === 'busy' ? undefined : claim;
            });
            const taken = acquired(fresh);
            expect(taken.takeover).toBe(true);
            expect(taken.owner).not.toBe(stale.owner);

            expect(await env.store.completeLease(key, stale.owner, { by: 'stale' })).toBe(false);
            expect(await env.store.renewLease(key, stale.owner, 30_000)).toBe(false);
            await env.store.releaseLease(key, stale.owner);
            expect((await env.store.acquireLease(key, 30_000)).status).toBe('busy');

            expect(await env.store.completeLease(key, taken.owner, { by: 'fresh' })).toBe(true);
            expect(await env.store.acquireLease(key, 30_000)).toEqual({
              status: 'completed',
              result: { by: 'fresh' },
            });
            // The owner's completion is idempotent (a retry after a lost answer succeeds)
            // and keeps the first result.
            expect(await env.store.completeLease(key, taken.owner, { by: 'again' })).toBe(true);
            expect(await env.store.acquireLease(key, 30_000)).toEqual({
              status: 'completed',
              result: { by: 'fresh' },
            });
          }),
        timeout,
      );

      // Catches: a completed claim that is handed out again (long work done twice) or
      // loses its result.
      it(
        'a completed claim returns its stored result',
        () =>
          withStore(async (env) => {
            const key = env.key('completed');
            const claim = acquired(await env.store.acquireLease(key, 30_000));
            const result = { reportId: 'r-1', pages: [1, 2, 3], note: null };
            expect(await env.store.completeLease(key, claim.owner, result)).toBe(true);
            expect(await env.store.acquireLease(key, 30_000)).toEqual({ status: 'completed', result });
            const bare = acquired(await env.store.acquireLease(env.key('no-result'), 30_000));
            expect(await env.store.completeLease(env.key('no-result'), bare.owner, undefined)).toBe(true);
            expect(await env.store.acquireLease(env.key('no-result'), 30_000)).toEqual({
              status: 'completed',
              result: null,
            });
          }),
        timeout,
      );

      // Catches: a release that leaves the claim (the retry waits for the deadline) and
      // renewals that do not move the deadline.
      it(
        'release hands the claim to the next delivery; renew extends it',
        () =>
          withStore(async (env) => {
            const key = env.key('released');
            const first = acquired(await env.store.acquireLease(key, 30_000));
            await env.store.releaseLease(key, first.owner);
            const second = acquired(await env.store.acquireLease(key, 400));
            expect(second.takeover).toBe(false);
            expect(await env.store.renewLease(key, second.owner, 30_000)).toBe(true);
            const busy = await env.store.acquireLease(key, 30_000);
            expect(busy.status).toBe('busy');
            if (busy.status === 'busy') {
              expect(busy.lockedUntil.getTime()).toBeGreaterThan(second.lockedUntil.getTime() + 10_000);
            }
          }),
        timeout,
      );
    });

    describe('retention and schema', () => {
      // Catches: prune stopping after the first batch, deleting recent markers, deleting
      // claims in progress, or ignoring the consumer filter.
      it(
        'prune deletes old completed markers in batches and keeps the rest',
        async (ctx) => {
          await withStore(async (env) => {
            const store = env.store as IdempotencyStore<SqlClient> & Partial<PruningStore>;
            if (typeof store.prune !== 'function') ctx.skip('the store has no prune()');
            const prune = store.prune!.bind(store);
            const pruned = env.consumer('pruned');
            const kept = env.consumer('kept');
            const prunedIds = Array.from({ length: 25 }, (_, i) => `p-${i}`);
            const keptIds = ['k-1', 'k-2', 'k-3'];
            await env.store.transaction((tx) => env.store.claim(tx, pruned, prunedIds));
            await env.store.transaction((tx) => env.store.claim(tx, kept, keptIds));
            const lease = { consumer: pruned, messageId: 'in-progress' };
            acquired(await env.store.acquireLease(lease, 3_600_000));
            const attemptKey = { consumer: pruned, messageId: 'attempted' };
            await env.store.recordAttempt(attemptKey);
            expect(await env.store.recordAttempt(attemptKey)).toBe(2);

            expect(await prune({ olderThan: 3_600_000 })).toBe(0);
            expect(await env.unclaimed(pruned, prunedIds)).toEqual([]);

            const future = new Date(Date.now() + 3_600_000);
            expect(await prune({ olderThan: future, batchSize: 10, consumer: pruned })).toBe(25);
            expect((await env.unclaimed(pruned, prunedIds)).length).toBe(25);
            expect(await env.unclaimed(kept, keptIds)).toEqual([]);
            expect((await env.store.acquireLease(lease, 30_000)).status).toBe('busy');
            expect(await env.store.recordAttempt(attemptKey)).toBe(1);

            expect(await prune({ olderThan: future, batchSize: 2 })).toBe(3);
            expect((await env.unclaimed(kept, keptIds)).length).toBe(3);
          });
        },
        timeout,
      );

      // Catches: migrators that race (CREATE SCHEMA/TABLE collisions, migrations applied
      // twice) when several instances start at once, and a second migrate() that is not a no-op.
      it(
        'concurrent migrate() calls are safe and a later migrate() is a no-op',
        async (ctx) => {
          await withStore(
            async (env) => {
              const store = env.store as IdempotencyStore<SqlClient> & Partial<MigratingStore>;
              if (typeof store.migrate !== 'function') ctx.skip('the store has no migrate()');
              const stores: Array<IdempotencyStore<SqlClient> & Partial<MigratingStore>> = [store];
              for (let i = 0; i < 2; i++) stores.push(env.under.sibling ? await env.sibling() : store);
              const results = await Promise.all(stores.map((s) => s.migrate!()));
              const applied = results.map((result) => (result as { applied?: unknown })?.applied);
              if (applied.every(Array.isArray)) {
                expect(applied.filter((list) => (list as unknown[]).length > 0)).toHaveLength(1);
              }
              const again = await store.migrate!();
              const appliedAgain = (again as { applied?: unknown })?.applied;
              if (Array.isArray(appliedAgain)) expect(appliedAgain).toEqual([]);
              for (const s of stores) {
                const key = env.key(`after-migrate-${randomUUID()}`);
                expect((await processOnce(s, key, async () => {})).status).toBe('processed');
              }
            },
            { migrated: false },
          );
        },
        timeout,
      );

      // Catches: offsets that move backwards or let an already-applied record apply again.
      it(
        'offsets advance only forward, in the same transaction as the output',
        async (ctx) => {
          await withStore(async (env) => {
            const offsets = env.store.offsets;
            if (!offsets) ctx.skip('the store keeps no offsets');
            const consumer = env.consumer('offsets');
            const advance = (partition: number, offset: string, rollback = false) =>
              env.store
                .transaction(async (tx) => {
                  const advanced = await offsets!.advance(tx, consumer, 'orders', partition, offset);
                  if (rollback) throw new RollbackProbe();
                  return advanced;
                })
                .catch((error: unknown) => {
                  if (error instanceof RollbackProbe) return 'rolled back';
                  throw error;
                });
            expect(await advance(0, '5')).toBe(true);
            expect(await advance(0, '5')).toBe(false);
            expect(await advance(0, '4')).toBe(false);
            expect(await advance(0, '6', true)).toBe('rolled back');
            expect(await advance(0, '6')).toBe(true);
            expect(await advance(0, '9000000000000')).toBe(true);
            expect(await advance(1, '0')).toBe(true);
            const read = await offsets!.read(consumer, 'orders');
            expect(Object.fromEntries(read)).toEqual({ 0: '9000000000001', 1: '1' });
            expect((await offsets!.read(consumer, 'other-topic')).size).toBe(0);
          });
        },
        timeout,
      );
    });
  });
}

/** Per-test helpers: unique names, business tables, row counts. */
class TestEnv {
  private readonly suffix = randomUUID().replaceAll('-', '').slice(0, 12);
  private readonly tables: string[] = [];
  private readonly siblings: Array<IdempotencyStore<SqlClient>> = [];

  constructor(readonly under: StoreUnderTest) {}

  get store(): IdempotencyStore<SqlClient> {
    return this.under.store;
  }

  get sql(): SqlDialect {
    return this.under.sql ?? POSTGRES_DIALECT;
  }

  /** DDL where the dialect runs it (outside store transactions on MySQL), else in a store transaction. */
  async ddl(statement: string): Promise<void> {
    if (this.sql.ddl) await this.sql.ddl(statement);
    else await this.store.transaction((tx) => tx.query(statement));
  }

  consumer(label: string): string {
    return `${label}-${this.suffix}`;
  }

  key(messageId: string, consumerLabel = 'conformance'): MessageKey {
    return { consumer: this.consumer(consumerLabel), messageId };
  }

  /** Another store on the same schema, or the same store when the factory has none. */
  async sibling(): Promise<IdempotencyStore<SqlClient>> {
    if (!this.under.sibling) return this.store;
    const store = await this.under.sibling();
    this.siblings.push(store);
    return store;
  }

  /**
   * A business table written through `tx`. Without `unique`, nothing stops a second row
   * per ID: a doubled effect shows up in the counts.
   */
  async effectsTable(options: { unique?: boolean } = {}): Promise<EffectsTable> {
    const base = `effects_${this.suffix}_${this.tables.length}`;
    const { quote } = this.sql;
    const name = this.under.schema ? `${quote(this.under.schema)}.${quote(base)}` : quote(base);
    const key = options.unique ? ' PRIMARY KEY' : '';
    await this.ddl(`CREATE TABLE ${name} (message_id ${this.sql.types.key} NOT NULL${key})`);
    this.tables.push(name);
    return new EffectsTable(this.store, name, this.sql);
  }

  /**
   * Which of `ids` have no marker for `consumer`, found by claiming them in a transaction
   * that is then rolled back (the probe leaves nothing behind).
   */
  async unclaimed(consumer: string, ids: string[]): Promise<string[]> {
    let claimed: string[] = [];
    await this.store
      .transaction(async (tx) => {
        claimed = [...(await this.store.claim(tx, consumer, ids))].sort();
        throw new RollbackProbe();
      })
      .catch((error: unknown) => {
        if (!(error instanceof RollbackProbe)) throw error;
      });
    return claimed;
  }

  async close(passed: boolean): Promise<void> {
    try {
      for (const store of this.siblings) await store.close();
      if (passed && !this.under.schema) {
        for (const table of this.tables) await this.ddl(`DROP TABLE IF EXISTS ${table}`);
      }
    } finally {
      await this.under.cleanup({ passed });
    }
  }
}

class EffectsTable {
  constructor(
    private readonly store: IdempotencyStore<SqlClient>,
    readonly name: string,
    private readonly sql: SqlDialect,
  ) {}

  async insert(tx: SqlClient, messageId: string): Promise<void> {
    await tx.query(`INSERT INTO ${this.name} (message_id) VALUES (${this.sql.param(1)})`, [messageId]);
  }

  async count(messageId: string): Promise<number> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ n: number }>(
        `SELECT ${this.sql.count} AS n FROM ${this.name} WHERE message_id = ${this.sql.param(1)}`,
        [messageId],
      ),
    );
    return Number(rows[0]?.n ?? 0);
  }

  async total(): Promise<number> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ n: number }>(`SELECT ${this.sql.count} AS n FROM ${this.name}`),
    );
    return Number(rows[0]?.n ?? 0);
  }

  async perId(): Promise<Map<string, number>> {
    const { rows } = await this.store.transaction((tx) =>
      tx.query<{ message_id: string; n: number }>(
        `SELECT message_id, ${this.sql.count} AS n FROM ${this.name} GROUP BY message_id`,
      ),
    );
    return new Map(rows.map((row) => [row.message_id, Number(row.n)]));
  }
}

/** Thrown inside a transaction to roll it back on purpose. */
class RollbackProbe extends Error {
  constructor() {
    super('rolled back on purpose by the conformance suite');
  }
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

function acquired(claim: LeaseClaim | undefined): Extract<LeaseClaim, { status: 'acquired' }> {
  expect(claim?.status).toBe('acquired');
  return claim as Extract<LeaseClaim, { status: 'acquired' }>;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the operation to fail');
}

/** Polls `probe` until it returns a value, failing after `timeoutMs`. */
async function eventually<T>(probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
