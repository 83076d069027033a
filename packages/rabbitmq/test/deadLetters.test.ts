import { type Consumer, type ConsumerConfig, createConsumer, DeadLetters, silentLogger } from '@oncely/core';
import {
  assertTopology,
  DEAD_LETTERED_AT_HEADER,
  DETAIL_HEADER,
  RabbitMqOperationError,
  REASON_HEADER,
} from '@oncely/rabbitmq';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestStore,
  DATABASE_URL,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// `DeadLetters` (oncely dlq) on real RabbitMQ and PostgreSQL: 50 dead letters for two
// reasons, listed in failure groups, one group replayed and processed once (effects
// counted from rows), a second replay a no-op, the other group discarded with a record.
const available = await servicesAvailable();

type Body = { id: string };

describe.skipIf(!available)('RabbitMQ dead letters (real RabbitMQ + PostgreSQL)', () => {
  let raw: RawBroker;
  let db: TestStore;
  let admin: pg.Client;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
    admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(async () => {
    await admin?.end();
    await db?.cleanup();
    await raw?.close();
  });

  /**
   * A consumer whose handler throws while `broken.on` is set, and once more for each message
   * after the fix (a flaky dependency: a replayed message needs a fresh attempt budget);
   * effects are rows.
   */
  async function startConsumer(queue: string, broken: { on: boolean }) {
    const failedAfterFix = new Set<string>();
    const config: ConsumerConfig<Body> = {
      name: `c-${queue}`,
      broker: { type: 'rabbitmq', url: RABBITMQ_URL, queue },
      store: db.store,
      logger: silentLogger,
      maxAttempts: 2,
      backoff: { initialMs: 10, maxMs: 20 },
      concurrency: 8,
      handler: async (message, ctx) => {
        if (broken.on) throw new Error('payment service down');
        if (!failedAfterFix.has(message.id)) {
          failedAfterFix.add(message.id);
          throw new Error('payment service warming up');
        }
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    };
    const consumer: Consumer<Body> = await createConsumer(config);
    await consumer.start();
    cleanups.push(() => consumer.stop());
    cleanups.push(() => deleteTopology(raw, queue, [10, 20, 25, 30]));
    const duplicates: string[] = [];
    consumer.on('duplicate', (event) => duplicates.push(event.messageId!));
    return { config, duplicates };
  }

  it('lists two failure groups, replays one once, no-ops the second replay, discards the other', async () => {
    const queue = unique('dlq');
    const broken = { on: true };
    const { config, duplicates } = await startConsumer(queue, broken);
    const failing = Array.from({ length: 25 }, (_, i) => `${queue}-fail-${i}`);
    const garbled = Array.from({ length: 25 }, (_, i) => `${queue}-bad-${i}`);
    await raw.publish(queue, [
      ...failing.map((id) => ({ id, body: { id } })),
      ...garbled.map((id, i) => ({ id, rawBody: `{"id": "${id}", broken ${i}` })),
    ]);
    await waitFor(async () => (await raw.ready(`${queue}.dlq`)) === 50, '50 dead letters', 60_000);

    const dlq = await DeadLetters.open({ ...config });
    const listed = await dlq.list();
    expect(listed.letters).toHaveLength(50);
    const byReason = Object.fromEntries(listed.groups.map((g) => [g.reason, g]));
    expect(listed.groups).toHaveLength(2);
    expect(byReason['max-attempts']!.count).toBe(25);
    expect(byReason['invalid-body']!.count).toBe(25);
    expect(byReason['max-attempts']!.error).toContain('payment service down');
    const failed = listed.letters.find((l) => l.messageId === failing[0])!;
    expect(failed).toMatchObject({ reason: 'max-attempts', attempts: 2 });
    expect(failed.lastFailedAt).toBeInstanceOf(Date);
    expect(failed.attributes[REASON_HEADER]).toBeUndefined();

    // Listing gave everything back, in the same order.
    expect(await raw.ready(`${queue}.dlq`)).toBe(50);
    const again = await dlq.list();
    expect(again.letters.map((l) => l.messageId)).toEqual(listed.letters.map((l) => l.messageId));

    const dry = await dlq.replay({ group: byReason['max-attempts']!.id }, { dryRun: true });
    expect(dry).toMatchObject({ dryRun: true, alreadyProcessed: [], withoutId: 0 });
    expect([...dry.replayed].sort()).toEqual([...failing].sort());
    expect(await raw.ready(`${queue}.dlq`)).toBe(50);
    expect(await db.effectCount()).toBe(0);

    broken.on = false; // the fix is deployed
    const replayed = await dlq.replay({ group: byReason['max-attempts']!.id });
    expect(replayed.replayed).toHaveLength(25);
    await waitFor(async () => (await db.effectCount()) === 25, '25 effects', 60_000);
    const effects = await db.effects();
    expect([...effects.keys()].sort()).toEqual([...failing].sort());
    expect([...effects.values()].every((n) => n === 1)).toBe(true);
    expect(await raw.ready(`${queue}.dlq`)).toBe(25);

    // The group is gone from the DLQ: replaying it again moves nothing.
    const second = await dlq.replay({ group: 'max-attempts' });
    expect(second).toMatchObject({ replayed: [], alreadyProcessed: [], withoutId: 0 });
    expect(await raw.ready(`${queue}.dlq`)).toBe(25);

    // A copy left in the DLQ by a replay that died after the re-send: the dry run says it
    // is processed, and replaying it is absorbed as a duplicate.
    await raw.publish(`${queue}.dlq`, [
      {
        id: failing[3],
        body: { id: failing[3] },
        headers: {
          [REASON_HEADER]: 'max-attempts',
          [DETAIL_HEADER]: 'x',
          [DEAD_LETTERED_AT_HEADER]: Date.now(),
        },
      },
    ]);
    const dryCopy = await dlq.replay({ ids: [failing[3]!, 'nope'] }, { dryRun: true });
    expect(dryCopy).toMatchObject({ replayed: [], alreadyProcessed: [failing[3]], notFound: ['nope'] });
    await dlq.replay({ ids: [failing[3]!] });
    await waitFor(async () => (await raw.ready(`${queue}.dlq`)) === 25, 'the copy replayed');

    // Discard the other group: recorded first, then removed.
    const discarded = await dlq.discard({ group: 'invalid-body' }, { by: 'tester' });
    expect(discarded.discarded).toHaveLength(25);
    expect(await raw.ready(`${queue}.dlq`)).toBe(0);
    const { rows } = await admin.query<{ message_id: string; reason: string; discarded_by: string }>(
      `SELECT message_id, reason, discarded_by FROM "${db.schema}".dead_letter_discards WHERE consumer = $1`,
      [config.name],
    );
    expect(rows.map((r) => r.message_id).sort()).toEqual([...garbled].sort());
    expect(new Set(rows.map((r) => `${r.reason}/${r.discarded_by}`))).toEqual(
      new Set(['invalid-body/tester']),
    );
    expect((await db.store.deadLetterLog.discards(config.name, garbled[0]!))[0]).toMatchObject({
      reason: 'invalid-body',
      discardedBy: 'tester',
    });

    // The duplicate copy was acked as such (a marker exists): still one effect each.
    await waitFor(() => duplicates.length === 1, 'the copy acked as a duplicate');
    expect(duplicates).toEqual([failing[3]]);
    expect(await db.effectCount()).toBe(25);
  }, 180_000);

  it('a re-send the broker refuses leaves the dead letter where it was', async () => {
    const queue = unique('dlqgone');
    cleanups.push(() => deleteTopology(raw, queue));
    const channel = await raw.connection.createConfirmChannel();
    await assertTopology(channel, { queue });
    await channel.close();
    const ids = ['a', 'b', 'c'].map((n) => `${queue}-${n}`);
    await raw.publish(
      `${queue}.dlq`,
      ids.map((id) => ({ id, body: { id }, headers: { [REASON_HEADER]: 'max-attempts' } })),
    );
    // The source queue is gone: every re-send comes back unroutable (mandatory).
    await raw.deleteQueues(queue);
    const dlq = await DeadLetters.open({
      name: `c-${queue}`,
      broker: { type: 'rabbitmq', url: RABBITMQ_URL, queue },
      store: db.store,
      handler: async () => {},
    });
    await expect(dlq.replay({})).rejects.toBeInstanceOf(RabbitMqOperationError);
    expect(await raw.ready(`${queue}.dlq`)).toBe(3);
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(ids);
  });
});
