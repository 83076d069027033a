/**
 * The dead-letter ledger and its pass lock (`store.deadLetterLog.ledger`), which a
 * log-based dead-letter queue (Kafka) needs for `oncely dlq`: what each dead letter became,
 * and one pass at a time, with a lock a killed process lets go of at once.
 */
import type { DeadLetterLedger, DeadLetterLedgerEntry } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import type { StoreCases, TestEnv } from './testEnv.js';

/** The store's ledger; the case is skipped (with the reason) when the store has none. */
function ledgerOf(env: TestEnv, skip: (reason: string) => never): DeadLetterLedger {
  const ledger = env.store.deadLetterLog?.ledger;
  if (!ledger) skip('the store has no dead-letter ledger');
  return ledger!;
}

function row(
  consumer: string,
  queue: string,
  partition: number,
  offset: string,
  state: DeadLetterLedgerEntry['state'],
  extra: Partial<DeadLetterLedgerEntry> = {},
): DeadLetterLedgerEntry {
  return {
    consumer,
    queue,
    partition,
    offset,
    fingerprint: `fp-${partition}-${offset}`,
    state,
    at: new Date('2026-12-06T10:00:00.123Z'),
    ...extra,
  };
}

/** The `dead-letter ledger` cases. */
export function deadLetterLedgerCases({ withStore, timeout }: StoreCases): void {
  describe('dead-letter ledger', () => {
    // Catches: rows of one consumer or queue seen by another, an upsert that inserts a second
    // row (or keeps the old state), offsets above 2^53 mangled, a delete or prune that takes
    // more than it names.
    it(
      'puts, replaces, lists, deletes and prunes rows per consumer and queue',
      async (ctx) => {
        await withStore(async (env) => {
          const ledger = ledgerOf(env, ctx.skip);
          const consumer = env.consumer('ledger');
          const other = env.consumer('other');
          const big = '9007199254740993'; // 2^53 + 1: not a safe JS number
          await ledger.put([
            row(consumer, 'q.dlq', 0, '5', 'replaying', {
              messageId: 'm-5',
              target: { topic: 'q', partition: 0, from: '40' },
            }),
            row(consumer, 'q.dlq', 0, big, 'discarded'),
            row(consumer, 'q.dlq', 1, '7', 'replayed'),
            row(consumer, 'other.dlq', 0, '5', 'replayed'),
            row(other, 'q.dlq', 0, '5', 'discarded'),
          ]);
          const first = await ledger.entries(consumer, 'q.dlq');
          expect(first.map((e) => `${e.partition}/${e.offset}/${e.state}`)).toEqual([
            '0/5/replaying',
            `0/${big}/discarded`,
            '1/7/replayed',
          ]);
          expect(first[0]).toEqual(
            row(consumer, 'q.dlq', 0, '5', 'replaying', {
              messageId: 'm-5',
              target: { topic: 'q', partition: 0, from: '40' },
            }),
          );
          // The intent becomes done: the same row, replaced in place.
          await ledger.put([
            row(consumer, 'q.dlq', 0, '5', 'replayed', {
              messageId: 'm-5',
              target: { topic: 'q', partition: 0, from: '40', offset: '41' },
            }),
          ]);
          const second = await ledger.entries(consumer, 'q.dlq');
          expect(second).toHaveLength(3);
          expect(second[0]).toMatchObject({ state: 'replayed', target: { offset: '41', from: '40' } });

          await ledger.delete(consumer, 'q.dlq', [{ partition: 1, offset: '7' }]);
          expect((await ledger.entries(consumer, 'q.dlq')).map((e) => e.offset)).toEqual(['5', big]);
          // Partition 0 now starts above 5: that row's record expired; partition 1 is not named.
          await ledger.put([row(consumer, 'q.dlq', 1, '3', 'replayed')]);
          expect(await ledger.prune(consumer, 'q.dlq', new Map([[0, '6']]))).toBe(2);
          expect((await ledger.entries(consumer, 'q.dlq')).map((e) => `${e.partition}/${e.offset}`)).toEqual([
            `0/${big}`,
          ]);
          // Nothing of the other consumer or queue was touched.
          expect(await ledger.entries(consumer, 'other.dlq')).toHaveLength(1);
          expect(await ledger.entries(other, 'q.dlq')).toHaveLength(1);
          // Idempotent: a second prune or delete of the same finds nothing.
          expect(await ledger.prune(consumer, 'q.dlq', new Map([[0, '6']]))).toBe(0);
          await ledger.delete(consumer, 'q.dlq', [{ partition: 1, offset: '7' }]);
          expect(await ledger.entries(consumer, 'q.dlq')).toHaveLength(1);
        });
      },
      timeout,
    );

    // Catches: a lock that does not exclude a second pass (per consumer and queue), one
    // that excludes other queues, or one that a released pass keeps.
    it(
      'refuses a second pass while the first holds the lock, and lets it in after release',
      async (ctx) => {
        await withStore(async (env) => {
          const ledger = ledgerOf(env, ctx.skip);
          const consumer = env.consumer('lock');
          const sibling = (await env.sibling()).deadLetterLog?.ledger ?? ledger;
          const first = await ledger.tryLock(consumer, 'q.dlq');
          expect(first).toBeDefined();
          expect(first!.lost).toBe(false);
          expect(await sibling.tryLock(consumer, 'q.dlq')).toBeUndefined();
          expect(await ledger.tryLock(consumer, 'q.dlq')).toBeUndefined();
          const otherQueue = await sibling.tryLock(consumer, 'r.dlq');
          expect(otherQueue).toBeDefined();
          await otherQueue!.release();
          await first!.release();
          await first!.release(); // twice is harmless
          const second = await sibling.tryLock(consumer, 'q.dlq');
          expect(second).toBeDefined();
          await second!.release();
        });
      },
      timeout,
    );

    // Catches: a lock kept in a table or on a pooled connection that outlives a killed
    // process (the next pass would wait for ever), and a holder that does not notice.
    it(
      'the lock is released when its connection dies',
      async (ctx) => {
        await withStore(async (env) => {
          const ledger = ledgerOf(env, ctx.skip);
          const kill = env.under.killDeadLetterLock;
          if (!kill) ctx.skip('single-connection store: the lock lives and dies with the process');
          const consumer = env.consumer('killed');
          const held = await ledger.tryLock(consumer, 'q.dlq');
          expect(held).toBeDefined();
          const sibling = (await env.sibling()).deadLetterLog!.ledger!;
          expect(await sibling.tryLock(consumer, 'q.dlq')).toBeUndefined();
          await kill!(consumer, 'q.dlq');
          const deadline = Date.now() + 10_000;
          let next = await sibling.tryLock(consumer, 'q.dlq');
          while (!next && Date.now() < deadline) {
            await new Promise((resolve) => setTimeout(resolve, 50));
            next = await sibling.tryLock(consumer, 'q.dlq');
          }
          expect(next).toBeDefined();
          while (!held!.lost && Date.now() < deadline)
            await new Promise((resolve) => setTimeout(resolve, 50));
          expect(held!.lost).toBe(true);
          await held!.release();
          await next!.release();
        });
      },
      timeout,
    );
  });
}
