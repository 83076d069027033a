/** Scenario 15: ordering per key, with one retry in the middle. */
import type { HandlerContext, Message, SqlClient } from '@oncely/core';
import { expect } from 'vitest';
import { effectsWait } from '../ScenarioRun.js';
import { expectOneEffectEach, needs, type Scenario } from './scenario.js';

export const ordering: Scenario = {
  n: 15,
  slug: 'ordering',
  title: 'ordering per key with one retry in the middle',
  // Catches reordering on retry: a broker or adapter that hands out key-b-4 while
  // key-b-3 waits for its retry commits them out of order.
  missing: (f) => needs(f, 'ordering', 'redeliveryOnRetry'),
  setup: () => ({ leaseMs: 10_000, ordered: true, partitions: 3 }),
  timeoutMs: 90_000,
  async body({ run, t }) {
    const keys = ['key-a', 'key-b', 'key-c'];
    const perKey = 8;
    const failing = 'key-b-3';
    const messages = [];
    for (let seq = 0; seq < perKey; seq++) {
      for (const key of keys) messages.push({ id: `${key}-${seq}`, body: { key, seq }, orderingKey: key });
    }
    await run.startConsumer({
      label: 'a',
      concurrency: 3,
      backoff: { initialMs: 100, maxMs: 500 },
      handler: async (message: Message<any>, ctx: HandlerContext<SqlClient>) => {
        const { key, seq } = message.body as { key: string; seq: number };
        await ctx.tx.query(run.insertEffectSql, [message.id, ctx.attempt, 'a', key, seq]);
        if (message.id === failing && ctx.attempt === 1)
          throw new Error('planned failure in the middle of key-b');
      },
    });
    await run.publish(messages);
    const counts = await run.waitForEffects(
      messages.map((m) => m.id),
      t(60_000, effectsWait(messages.length)),
    );
    expectOneEffectEach(
      counts,
      messages.map((m) => m.id),
    );
    expect(run.spy.countFor('retried', failing), `retries of ${failing}`).toBe(1);
    const rows = await run.effectRows();
    for (const key of keys) {
      const order = rows.filter((row) => row.ordering_key === key).map((row) => row.seq);
      expect(order, `commit order of ${key}`).toEqual(Array.from({ length: perKey }, (_, seq) => seq));
    }
  },
};
