import type { ConsumerConfig, ConsumerEvent, ConsumerEventName, Handler, SqlClient } from '@oncely/core';
import { Consumer, HandlerTimeoutError, LeaseLostError, StoreUnavailableError } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { Latch, waitFor } from '@oncely/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { placeholderBroker, ScriptedAdapter } from './ScriptedAdapter.js';

// The core pipeline on the embedded store (PGlite), driven by a scripted adapter so each
// decision (ack, retry, dead-letter, release) can be checked in isolation.

let store: PostgresStore;
let table = 0;

beforeAll(async () => {
  store = await PostgresStore.embedded();
  await store.migrate();
});
afterAll(async () => {
  await store.close();
});

let effects: string;
beforeEach(async () => {
  effects = `effects_${++table}`;
  await store.transaction((tx) => tx.query(`CREATE TABLE ${effects} (message_id text NOT NULL, note text)`));
});

async function effectCount(id?: string): Promise<number> {
  const { rows } = await store.transaction((tx) =>
    id === undefined
      ? tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${effects}`)
      : tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${effects} WHERE message_id = $1`, [id]),
  );
  return rows[0]!.n;
}

const writeEffect: Handler<unknown, SqlClient> = async (message, ctx) => {
  await ctx.tx.query(`INSERT INTO ${effects}(message_id) VALUES ($1)`, [message.id]);
};

async function startConsumer(
  patch: Partial<ConsumerConfig> = {},
  adapter = new ScriptedAdapter(),
): Promise<{
  consumer: Consumer;
  adapter: ScriptedAdapter;
  events: Array<[ConsumerEventName, ConsumerEvent]>;
}> {
  const consumer = new Consumer(
    {
      name: `pipeline-${table}`,
      broker: placeholderBroker(),
      store,
      handler: writeEffect,
      backoff: { initialMs: 100, maxMs: 1000 },
      ...patch,
    },
    adapter,
  );
  const events: Array<[ConsumerEventName, ConsumerEvent]> = [];
  for (const name of [
    'processed',
    'duplicate',
    'failed',
    'retried',
    'deadLettered',
    'leaseLost',
    'takeover',
  ] as const) {
    consumer.on(name, (event) => events.push([name, event]));
  }
  await consumer.start();
  return { consumer, adapter, events };
}

describe('pipeline (transactional)', () => {
  it('applies a message once and acks its duplicate without running the handler', async () => {
    let calls = 0;
    const { adapter, events, consumer } = await startConsumer({
      handler: async (m, ctx) => {
        calls++;
        await writeEffect(m, ctx);
      },
    });
    expect(await adapter.deliver({ id: 'a' })).toEqual({ kind: 'ack' });
    expect(await adapter.deliver({ id: 'a' })).toEqual({ kind: 'ack' });
    expect(calls).toBe(1);
    expect(await effectCount('a')).toBe(1);
    expect(events.map(([name]) => name)).toEqual(['processed', 'duplicate']);
    await consumer.stop();
  });

  it('dead-letters a message without an ID and never runs the handler', async () => {
    let calls = 0;
    const { adapter, consumer } = await startConsumer({ handler: async () => void calls++ });
    const settlement = await adapter.deliver({});
    expect(settlement).toMatchObject({ kind: 'dead-letter', reason: 'missing-id' });
    expect((settlement as { detail: string }).detail).toContain("attribute 'message-id'");
    expect(calls).toBe(0);
    await consumer.stop();
  });

  it('dead-letters a body that does not parse', async () => {
    const { adapter, consumer } = await startConsumer();
    expect(await adapter.deliver({ id: 'bad', body: '{not json' })).toMatchObject({
      kind: 'dead-letter',
      reason: 'invalid-body',
    });
    expect(await effectCount()).toBe(0);
    await consumer.stop();
  });

  it('rolls back a failed attempt, retries after the backoff, and counts attempts without a broker count', async () => {
    const attempts: number[] = [];
    const { adapter, consumer } = await startConsumer({
      handler: async (m, ctx) => {
        attempts.push(ctx.attempt);
        await writeEffect(m, ctx);
        if (ctx.attempt === 1) throw new Error('first attempt fails after writing');
      },
    });
    const first = await adapter.deliver({ id: 'r' });
    expect(first.kind).toBe('retry');
    expect((first as { delayMs: number }).delayMs).toBeGreaterThanOrEqual(100);
    expect(await effectCount('r')).toBe(0);
    expect(await adapter.deliver({ id: 'r' })).toEqual({ kind: 'ack' });
    expect(attempts).toEqual([1, 2]);
    expect(await effectCount('r')).toBe(1);
    await consumer.stop();
  });

  it('dead-letters after maxAttempts failures with the last error', async () => {
    const { adapter, consumer } = await startConsumer({
      maxAttempts: 2,
      handler: async () => {
        throw new Error('always broken');
      },
    });
    expect((await adapter.deliver({ id: 'p', deliveryCount: 1 })).kind).toBe('retry');
    const last = await adapter.deliver({ id: 'p', deliveryCount: 2 });
    expect(last).toMatchObject({ kind: 'dead-letter', reason: 'max-attempts' });
    expect((last as { detail: string }).detail).toContain('always broken');
    await consumer.stop();
  });

  it('dead-letters a delivery past maxAttempts (earlier attempts crashed) but still acks a duplicate', async () => {
    let calls = 0;
    const { adapter, consumer } = await startConsumer({ maxAttempts: 3, handler: async () => void calls++ });
    // What three redelivered runs that crashed the process left behind: each counted
    // itself up front. The broker's count alone (9 here) decides nothing.
    for (let crashed = 0; crashed < 3; crashed++) {
      await store.recordAttempt({ consumer: consumer.name, messageId: 'crashy' });
    }
    expect(await adapter.deliver({ id: 'crashy', deliveryCount: 9 })).toMatchObject({
      kind: 'dead-letter',
      reason: 'max-attempts',
    });
    expect(calls).toBe(0);
    expect(await adapter.deliver({ id: 'done', deliveryCount: 1 })).toEqual({ kind: 'ack' });
    expect(await adapter.deliver({ id: 'done', deliveryCount: 9 })).toEqual({ kind: 'ack' });
    expect(calls).toBe(1);
    await consumer.stop();
  });

  it('aborts ctx.signal at the handler timeout and rolls the work back', async () => {
    let reason: unknown;
    const { adapter, consumer } = await startConsumer({
      handlerTimeoutMs: 50,
      handler: async (m, ctx) => {
        await writeEffect(m, ctx);
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
        reason = ctx.signal.reason;
      },
    });
    expect((await adapter.deliver({ id: 'slow' })).kind).toBe('retry');
    expect(reason).toBeInstanceOf(HandlerTimeoutError);
    expect(await effectCount('slow')).toBe(0);
    await consumer.stop();
  });

  it('renews the lease while the handler runs and aborts ctx.signal when it is lost', async () => {
    let reason: unknown;
    const adapter = new ScriptedAdapter({ leaseMs: 60 });
    const { events, consumer } = await startConsumer(
      {
        handler: async (m, ctx) => {
          // Renewed twice (state, not a 150 ms pause) before the lease is lost.
          await waitFor(() => adapter.extensions >= 2, { description: 'two lease renewals' });
          adapter.leaseLost = true;
          await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
          reason = ctx.signal.reason;
          // Finishing anyway is safe: the unique key settles any race with the redelivery.
          await writeEffect(m, ctx);
        },
      },
      adapter,
    );
    expect(await adapter.deliver({ id: 'lease' })).toEqual({ kind: 'ack' });
    expect(adapter.extensions).toBeGreaterThanOrEqual(2);
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect(events.some(([name]) => name === 'leaseLost')).toBe(true);
    expect(await effectCount('lease')).toBe(1);
    await consumer.stop();
  });

  it('stop() waits for in-flight work, and releases what is dispatched afterwards', async () => {
    let finish!: () => void;
    let started!: () => void;
    const handlerStarted = new Promise<void>((resolve) => {
      started = resolve;
    });
    const { adapter, consumer } = await startConsumer({
      handler: async (m, ctx) => {
        started();
        await new Promise<void>((resolve) => {
          finish = resolve;
        });
        await writeEffect(m, ctx);
      },
    });
    const inFlight = adapter.deliver({ id: 'busy' });
    await handlerStarted;
    let stopped = false;
    const stopping = consumer.stop().then(() => {
      stopped = true;
    });
    expect(await adapter.deliver({ id: 'late' })).toEqual({ kind: 'release' });
    expect(stopped).toBe(false);
    finish();
    expect(await inFlight).toEqual({ kind: 'ack' });
    await stopping;
    expect(await effectCount('busy')).toBe(1);
    expect(await effectCount('late')).toBe(0);
  });
});

describe('pipeline (leased mode)', () => {
  it('runs outside a transaction, completes once, backs off while another holds the claim', async () => {
    let release!: () => void;
    let calls = 0;
    let txError: unknown;
    const { adapter, events, consumer } = await startConsumer({
      mode: 'leased',
      leaseMs: 5000,
      concurrency: 2,
      handler: async (_m, ctx) => {
        calls++;
        try {
          void ctx.tx;
        } catch (error) {
          txError = error;
        }
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        return { charged: 40 };
      },
    });
    const first = adapter.deliver({ id: 'long' });
    await expect.poll(() => calls).toBe(1);
    const busy = await adapter.deliver({ id: 'long' });
    expect(busy.kind).toBe('retry');
    expect((busy as { delayMs: number }).delayMs).toBeGreaterThan(1000);
    release();
    expect(await first).toEqual({ kind: 'ack' });
    expect(await adapter.deliver({ id: 'long' })).toEqual({ kind: 'ack' });
    expect(calls).toBe(1);
    expect(String(txError)).toContain("not available in 'leased' mode");
    // The busy delivery is retried later (not acked): the holder may still fail.
    expect(events.map(([name]) => name)).toEqual(['retried', 'processed', 'duplicate']);
    await consumer.stop();
  });

  it('takes over an expired claim', async () => {
    const key = { consumer: `pipeline-${table}`, messageId: 'orphan' };
    const stale = await store.acquireLease(key, 100);
    expect(stale.status).toBe('acquired');
    // Expired on the database clock (the one acquireLease judges by), not after a local sleep.
    await waitFor(
      async () => {
        const { rows } = await store.transaction((tx) =>
          tx.query<{ expired: boolean }>(
            'SELECT locked_until <= now() AS expired FROM oncely.processed_messages WHERE consumer = $1 AND message_id = $2',
            [key.consumer, key.messageId],
          ),
        );
        return rows[0]?.expired;
      },
      { description: "the orphan's 100 ms claim expired" },
    );
    const { adapter, events, consumer } = await startConsumer({ mode: 'leased', handler: async () => 'ok' });
    expect(await adapter.deliver({ id: 'orphan' })).toEqual({ kind: 'ack' });
    expect(events.map(([name]) => name)).toEqual(['takeover', 'processed']);
    if (stale.status === 'acquired') expect(await store.completeLease(key, stale.owner, 'late')).toBe(false);
    await consumer.stop();
  });
});

describe('pipeline (offsets mode)', () => {
  it('applies each offset once and skips records below the stored next offset', async () => {
    const { adapter, events, consumer } = await startConsumer({ mode: 'offsets', idStrategy: 'broker' });
    const record = (offset: number) => ({
      brokerMessageId: `t/0/${offset}`,
      offset: { topic: 't', partition: 0, offset: String(offset) },
    });
    expect(await adapter.deliver(record(5))).toEqual({ kind: 'ack' });
    expect(await adapter.deliver(record(5))).toEqual({ kind: 'ack' });
    expect(await adapter.deliver(record(3))).toEqual({ kind: 'ack' });
    expect(await adapter.deliver(record(6))).toEqual({ kind: 'ack' });
    expect(events.map(([name]) => name)).toEqual(['processed', 'duplicate', 'duplicate', 'processed']);
    expect(await effectCount()).toBe(2);
    expect((await store.offsets.read(`pipeline-${table}`, 't')).get(0)).toBe('7');
    await consumer.stop();
  });
});

describe('pipeline (batch)', () => {
  it('runs a batch in one transaction: new ones commit together, a failing one is retried alone', async () => {
    const seen: string[] = [];
    const { adapter, events, consumer } = await startConsumer({
      concurrency: 4,
      batch: { size: 4, maxWaitMs: 1000 },
      handler: async (m, ctx) => {
        seen.push(m.id);
        await writeEffect(m, ctx);
        if (m.id === 'b-bad') throw new Error('bad one');
      },
    });
    expect(await adapter.deliver({ id: 'b-known' })).toEqual({ kind: 'ack' });
    // Full at 4: runs at once although maxWaitMs is long.
    const settlements = await Promise.all(
      ['b-1', 'b-known', 'b-bad', 'b-2'].map((id) => adapter.deliver({ id })),
    );
    expect(settlements.map((s) => s.kind)).toEqual(['ack', 'ack', 'retry', 'ack']);
    // The savepoint-free pass stopped at b-bad and was rolled back; the isolated pass ran
    // the batch again (b-known was a duplicate both times, after its own delivery), all
    // but b-bad, whose first error stands (one run per attempt).
    expect(seen).toEqual(['b-known', 'b-1', 'b-bad', 'b-1', 'b-2']);
    expect(await effectCount('b-1')).toBe(1);
    expect(await effectCount('b-2')).toBe(1);
    expect(await effectCount('b-known')).toBe(1);
    // The failing handler's row and marker were rolled back with its savepoint.
    expect(await effectCount('b-bad')).toBe(0);
    const names = events.map(([name]) => name);
    expect(names.filter((n) => n === 'processed')).toHaveLength(3);
    expect(names.filter((n) => n === 'duplicate')).toHaveLength(1);
    expect(names.filter((n) => n === 'retried')).toHaveLength(1);
    await consumer.stop();
  });

  // stop() runs the partial batch at once; a delivery still being prepared then (its
  // run counted up front in the store) joined a batch that only its maxWaitMs timer ran:
  // stop() took that long, or gave up on it at its deadline and left it unsettled.
  it('runs a batch joined after stop() began at once, not after maxWaitMs', async () => {
    const counting = new Latch();
    const counted = new Latch();
    const recordAttempt = store.recordAttempt.bind(store);
    store.recordAttempt = async (key) => {
      counting.open();
      await counted.wait();
      return recordAttempt(key);
    };
    try {
      const { adapter, consumer } = await startConsumer({
        concurrency: 8,
        batch: { size: 8, maxWaitMs: 60_000 },
        stopTimeoutMs: 60_000,
      });
      // A redelivery without a delivery count: its run is counted before it joins a batch.
      const settlement = adapter.deliver({ id: 'late-joiner', redelivered: true });
      await counting.wait();
      const stopped = consumer.stop();
      counted.open();
      await stopped;
      expect(await settlement).toEqual({ kind: 'ack' });
      expect(await effectCount('late-joiner')).toBe(1);
    } finally {
      store.recordAttempt = recordAttempt;
    }
  });

  // The up-front count of a redelivery is its own commit. When that commit lands and its
  // answer is lost (the connection drops), the core waits out the outage and sends the
  // count again: one run counted twice, a message dead-lettered a run early.
  it('counts a run once when the answer of its count was lost and the count is sent again', async () => {
    const recordAttempt = store.recordAttempt.bind(store);
    let lost = 0;
    store.recordAttempt = async (...args) => {
      const count = await recordAttempt(...args);
      // The store's own error for a connection that dropped after the statement was sent.
      if (lost++ === 0) throw new StoreUnavailableError('the answer of the count was lost');
      return count;
    };
    try {
      const attempts: Array<number | undefined> = [];
      const { adapter, consumer } = await startConsumer({
        handler: async (message, ctx) => {
          attempts.push(message.deliveryAttempt);
          await writeEffect(message, ctx);
        },
      });
      expect(await adapter.deliver({ id: 'answer-lost', redelivered: true })).toEqual({ kind: 'ack' });
      expect(lost, 'the count was sent again').toBe(2);
      expect(attempts).toEqual([1]);
      await consumer.stop();
    } finally {
      store.recordAttempt = recordAttempt;
    }
  });

  // The same lost answer, and the store stays down past outageHoldMs: the delivery is
  // released, and a release is never an attempt, so the count that landed is taken back.
  // Before, the core only knew of a count once its answer came, and this one stayed.
  it('takes back the landed count of a run released after a lost answer', async () => {
    const recordAttempt = store.recordAttempt.bind(store);
    const ping = store.ping.bind(store);
    let down = false;
    store.recordAttempt = async (...args) => {
      await recordAttempt(...args);
      throw new StoreUnavailableError('the answer of the count was lost');
    };
    store.ping = async () => {
      if (down) throw new StoreUnavailableError('still down');
      return ping();
    };
    try {
      const { adapter, consumer } = await startConsumer({ outageHoldMs: 200 });
      down = true;
      expect(await adapter.deliver({ id: 'released-after-loss', redelivered: true })).toEqual({
        kind: 'release',
      });
      down = false;
      const { rows } = await store.transaction((tx) =>
        tx.query<{ attempts: number }>(
          `SELECT attempts FROM "${store.schema}".attempts WHERE consumer = $1 AND message_id = $2`,
          [consumer.name, 'released-after-loss'],
        ),
      );
      expect(rows.map((row) => row.attempts)).toEqual([0]);
      await consumer.stop();
    } finally {
      store.recordAttempt = recordAttempt;
      store.ping = ping;
    }
  });

  it('runs a partial batch after maxWaitMs', async () => {
    const { adapter, consumer } = await startConsumer({ concurrency: 8, batch: { size: 8, maxWaitMs: 30 } });
    expect(await adapter.deliver({ id: 'lonely' })).toEqual({ kind: 'ack' });
    expect(await effectCount('lonely')).toBe(1);
    await consumer.stop();
  });
});
