import { completedPassOf, DeadLetters, failureGroupId, isOncelyError, replayReportOf } from '@oncely/core';
import { MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The broker-neutral part of DeadLetters (core): failure groups, selections, what a store without
// a dead-letter log can still do. The broker side is tested per adapter on real brokers.

describe('failureGroupId', () => {
  it('groups errors that differ only in their numbers, and keeps reasons apart', () => {
    const a = failureGroupId('invalid-body', 'Unexpected token b in JSON at position 12');
    expect(a).toMatch(/^invalid-body:[0-9a-f]{8}$/);
    expect(failureGroupId('invalid-body', 'Unexpected token b in JSON at position 40')).toBe(a);
    expect(failureGroupId('invalid-body', 'Unexpected end of JSON input')).not.toBe(a);
    const other = failureGroupId('max-attempts', 'Unexpected token b in JSON at position 12');
    expect(other).not.toBe(a);
    expect(other.split(':')[1]).toBe(a.split(':')[1]);
    expect(failureGroupId('max-attempts', undefined)).toBe(failureGroupId('max-attempts', ''));
  });
});

/** A dead-letter module whose one session reads `letters`; `session` overrides its calls. */
function fakeDeadLetters(letters: unknown[], session: Record<string, unknown> = {}): never {
  return {
    openDeadLetters: async () => ({
      name: 'orders.dlq',
      defaultIdStrategy: 'producer' as const,
      read: async () => letters,
      replay: async () => {},
      remove: async () => {},
      close: async () => {},
      ...session,
    }),
  } as never;
}

describe('DeadLetters on the memory broker', () => {
  const broker = new MemoryBroker();
  const store = PostgresStore.embedded();
  const config = {
    name: 'unit',
    broker: { type: 'memory' as const, broker, queue: 'orders' },
    store,
    handler: async () => {},
  };

  beforeAll(async () => {
    await store.migrate();
    for (const [id, reason, detail] of [
      ['a', 'invalid-body', 'at position 1'],
      ['b', 'invalid-body', 'at position 22'],
      ['c', 'max-attempts', 'failed 5 times; last error: boom'],
    ] as const) {
      await broker.send('orders', { id, body: {} });
      const [delivery] = await broker.receive('orders');
      await broker.deadLetter(delivery!.receipt, reason, detail);
    }
  }, 120_000); // the embedded PostgreSQL starts and migrates
  afterAll(async () => {
    broker.close();
    await store.close();
  });

  it('lists groups largest first with counts and the numbers masked', async () => {
    const dlq = await DeadLetters.open(config);
    const { groups, letters } = await dlq.list();
    expect(letters.map((l) => l.messageId)).toEqual(['a', 'b', 'c']);
    expect(groups.map((g) => [g.reason, g.count, g.error])).toEqual([
      ['invalid-body', 2, 'at position #'],
      ['max-attempts', 1, 'failed # times; last error: boom'],
    ]);
  });

  it('refuses IDs and a group together, reports IDs it does not hold, moves nothing on a dry run', async () => {
    const dlq = await DeadLetters.open(config);
    const both = await dlq.replay({ ids: ['a'], group: 'invalid-body' }).catch((e: unknown) => e);
    expect(isOncelyError(both, 'CONFIG_INVALID')).toBe(true);
    const dry = await dlq.replay({ ids: ['a', 'zzz'] }, { dryRun: true });
    expect(dry).toEqual({
      dryRun: true,
      replayed: ['a'],
      alreadyProcessed: [],
      withoutId: 0,
      notFound: ['zzz'],
    });
    expect(broker.deadLetters('orders')).toHaveLength(3);
  });

  it('discard takes everything only when asked by name: {} is refused, { all: true } combines with nothing', async () => {
    const dlq = await DeadLetters.open(config);
    // A forgotten selection must not wipe the dead-letter queue (as `oncely dlq discard` without --all).
    const none = await dlq.discard({}, { by: 'x' }).catch((e: unknown) => e);
    expect(isOncelyError(none, 'CONFIG_INVALID')).toBe(true);
    const both = await dlq
      .discard({ all: true, group: 'invalid-body' }, { by: 'x' })
      .catch((e: unknown) => e);
    expect(isOncelyError(both, 'CONFIG_INVALID')).toBe(true);
    const replayBoth = await dlq.replay({ all: true, ids: ['a'] }, { dryRun: true }).catch((e: unknown) => e);
    expect(isOncelyError(replayBoth, 'CONFIG_INVALID')).toBe(true);
    expect(broker.deadLetters('orders')).toHaveLength(3);
    // Replay's "no selection is everything" stays, and { all: true } says the same.
    expect((await dlq.replay({ all: true }, { dryRun: true })).replayed).toEqual(['a', 'b', 'c']);
  });

  it("a pass that fails and a close that fails too: the pass's own error is the one thrown", async () => {
    const passError = new Error('the re-send was refused');
    const module = fakeDeadLetters(
      [{ envelope: { body: '{}', attributes: {}, producerMessageId: 'a' }, reason: 'max-attempts' }],
      {
        replay: async () => {
          throw passError;
        },
        close: async () => {
          throw new Error('could not give back 1 of 1 dead letters');
        },
      },
    );
    const dlq = await DeadLetters.open(config, module);
    const thrown = await dlq.replay({}).catch((e: unknown) => e);
    expect(thrown).toBe(passError);
    // The close's failure is not lost either: it is attached to the pass's error as closeError.
    expect(String((thrown as Error & { closeError?: unknown }).closeError)).toContain('could not give back');
  });

  it("a pass that succeeds but whose close fails: the close's error carries the pass's result", async () => {
    const module = fakeDeadLetters(
      [{ envelope: { body: '{}', attributes: {}, producerMessageId: 'z' }, reason: 'max-attempts' }],
      {
        close: async () => {
          throw new Error('could not give back 1 of 1 dead letters');
        },
      },
    );
    const dlq = await DeadLetters.open(config, module);
    const thrown = await dlq.replay({}).catch((e: unknown) => e);
    // The letter was re-sent: an operator who only saw the close's error would not know it.
    expect(isOncelyError(thrown, 'DEAD_LETTER_CLOSE')).toBe(true);
    expect((thrown as Error).message).toMatch(/completed, but closing the dead-letter queue failed/);
    expect(String((thrown as Error).cause)).toContain('could not give back');
    expect(completedPassOf(thrown)).toEqual({
      replayed: ['z'],
      alreadyProcessed: [],
      withoutId: 0,
      notFound: [],
      dryRun: false,
    });
    // Any other error carries nothing.
    expect(completedPassOf(new Error('x'))).toBeUndefined();
  });

  it('a replay that fails part-way says on its error what it had done: replayed, failed, not attempted', async () => {
    // 120 letters: windows of 50, 50 and 20. One re-send of the second window is refused.
    const letters = Array.from({ length: 120 }, (_, n) => ({
      envelope: { body: '{}', attributes: {}, producerMessageId: `l${n}` },
      reason: 'max-attempts',
    }));
    const refusal = new Error('the broker refused l60');
    const sent: string[] = [];
    const module = fakeDeadLetters(letters, {
      replay: async (letter: (typeof letters)[number]) => {
        if (letter.envelope.producerMessageId === 'l60') throw refusal;
        sent.push(letter.envelope.producerMessageId);
      },
    });
    const dlq = await DeadLetters.open(config, module);
    const thrown = await dlq.replay({}).catch((e: unknown) => e);
    // The broker's own error, as before (callers test its class and message).
    expect(thrown).toBe(refusal);
    const report = replayReportOf(thrown);
    expect(report, 'the partial report on the error').toBeDefined();
    // In the DLQ's order: the first two windows but the refused one.
    const expected = Array.from({ length: 100 }, (_, n) => `l${n}`).filter((id) => id !== 'l60');
    expect(report!.replayed).toEqual(expected);
    expect([...sent].sort()).toEqual([...expected].sort());
    expect(report!.failed).toEqual([{ messageId: 'l60', error: 'the broker refused l60' }]);
    expect(report!.notAttempted, 'the third window: the pass stopped after the second').toBe(20);
    expect(report!.dryRun).toBe(false);
    expect(replayReportOf(new Error('any other error'))).toBeUndefined();
  });

  it('a partial report stays true when onReplayed throws, and a frozen error still carries it', async () => {
    const letters = ['x', 'y', 'z'].map((id) => ({
      envelope: { body: '{}', attributes: {}, producerMessageId: id },
      reason: 'max-attempts',
    }));
    const frozen = Object.freeze(new Error('refused z'));
    const module = fakeDeadLetters(letters, {
      replay: async (letter: (typeof letters)[number]) => {
        if (letter.envelope.producerMessageId === 'z') throw frozen;
      },
    });
    const dlq = await DeadLetters.open(config, module);
    // y moved, then the caller's callback threw: y is moved, not failed.
    const thrown = await dlq
      .replay(
        {},
        {
          onReplayed: (letter) => {
            if (letter.messageId === 'y') throw new Error('callback broke');
          },
        },
      )
      .catch((e: unknown) => e);
    const report = replayReportOf(thrown);
    expect(report, 'the report, on a frozen error too').toBeDefined();
    expect(report!.replayed).toEqual(['x', 'y']);
    expect(report!.failed).toEqual([{ messageId: 'z', error: 'refused z' }]);
    expect(report!.notAttempted).toBe(0);
    // The broker's refusal, wrapped only because it cannot carry the report itself.
    expect((thrown as Error).message).toBe('refused z');
    expect((thrown as Error).cause === frozen || thrown === frozen).toBe(true);
  });

  it('a letter whose reason or error is not text (a header a broker kept as a number) is listed, not a crash', async () => {
    const module = fakeDeadLetters([
      { envelope: { body: '{}', attributes: {}, producerMessageId: 'n' }, reason: 7, error: 42 },
      {
        envelope: { body: '{}', attributes: {}, producerMessageId: 'm' },
        reason: 'max-attempts',
        error: { code: 1 },
      },
    ]);
    const dlq = await DeadLetters.open(config, module);
    const { letters, groups } = await dlq.list();
    expect(letters.map((l) => [l.reason, l.error])).toEqual([
      ['7', '42'],
      ['max-attempts', '{"code":1}'],
    ]);
    expect(groups.map((g) => [g.reason, g.error])).toEqual([
      ['7', '#'],
      ['max-attempts', '{"code":#}'],
    ]);
  });

  it('without a deadLetterLog on the store: replay goes on, dry run and discard refuse', async () => {
    // The same store, seen without its dead-letter log (as a store that has none).
    const plain = new Proxy(store, {
      get: (target, key) => (key === 'deadLetterLog' ? undefined : Reflect.get(target, key, target)),
    });
    const dlq = await DeadLetters.open({ ...config, store: plain });
    const dry = await dlq.replay({ ids: ['c'] }, { dryRun: true }).catch((e: unknown) => e);
    expect(isOncelyError(dry, 'CONFIG_INVALID')).toBe(true);
    const discard = await dlq.discard({ ids: ['c'] }, { by: 'x' }).catch((e: unknown) => e);
    expect(isOncelyError(discard, 'CONFIG_INVALID')).toBe(true);
    expect(broker.deadLetters('orders')).toHaveLength(3);
    expect(await dlq.replay({ ids: ['c'] })).toMatchObject({ replayed: ['c'] });
    expect(broker.deadLetters('orders').map((d) => d.producerMessageId)).toEqual(['a', 'b']);
    expect(broker.stats('orders').visible).toBe(1);
  });
});
