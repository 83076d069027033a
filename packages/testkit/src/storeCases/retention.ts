/** Retention and schema: prune, concurrent migrate(), and the Kafka offsets table. */
import { randomUUID } from 'node:crypto';
import { type IdempotencyStore, processOnce, type SqlClient } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { acquired, RollbackProbe, type StoreCases } from './testEnv.js';

/** Optional capabilities a store may have beyond {@link IdempotencyStore}; detected at run time. */
interface MigratingStore {
  migrate(): Promise<unknown>;
}
interface PruningStore {
  prune(options: { olderThan: Date | number; batchSize?: number; consumer?: string }): Promise<number>;
}

/** The `retention and schema` cases. */
export function retentionAndSchemaCases({ withStore, timeout }: StoreCases): void {
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
}
