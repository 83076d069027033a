/**
 * `DeadLetters` (oncely dlq) on a real Kafka broker and PostgreSQL: 50 dead letters for two
 * reasons, listed in failure groups, one group replayed and processed once (effects counted
 * from rows), a second replay a no-op, the other group discarded with a record. Kafka keeps
 * every record, so what was done is in the store's ledger: the tests check its rows, and
 * that the dead-letter topic itself is never changed.
 */
import {
  type Consumer,
  type ConsumerConfig,
  createConsumer,
  DeadLetters,
  type IdempotencyStore,
  isOncelyError,
  silentLogger,
} from '@oncely/core';
import {
  DEAD_LETTER_HEADERS,
  deadLetterRecord,
  findDeadLetters,
  KafkaDeadLetterError,
  KafkaTopicMissingError,
  openDeadLetters,
} from '@oncely/kafka';
import type { Admin, Kafka, Producer } from 'kafkajs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clientUnderTest } from './support/harness.js';
import { createTopic, kafkaClient, publish, testBrokers, uniqueName } from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();

type Body = { id: string };

describe.skipIf(!brokers)('Kafka dead letters (real Kafka + PostgreSQL)', () => {
  let kafka: Kafka;
  let admin: Admin;
  let producer: Producer;
  let db: TestStore;
  let passed = true;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    kafka = kafkaClient(brokers!, 'oncely-dlq-test');
    admin = kafka.admin();
    await admin.connect();
    producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    db = await createTestStore('oncely_kafka_dlq');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') passed = false;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(async () => {
    await producer?.disconnect();
    await admin?.disconnect();
    await db?.close(passed);
  });

  function brokerOf(topic: string) {
    return {
      type: 'kafka' as const,
      brokers: brokers!,
      topic,
      fromBeginning: true,
      maxWaitTimeInMs: 200,
      sessionTimeout: 6000,
      ...clientUnderTest(),
    };
  }

  /** Each partition's end offset: what a pass must leave as it was (it never writes the DLQ). */
  async function ends(topic: string): Promise<string[]> {
    return (await admin.fetchTopicOffsets(topic)).map((p) => `${p.partition}:${p.high}`).sort();
  }

  /** Writes dead letters as the consumer `consumer` would have, from `topic`'s partition 0 (offset = index). */
  async function seedDeadLetters(
    dlqTopic: string,
    consumer: string,
    topic: string,
    letters: ReadonlyArray<{ id: string; reason?: 'max-attempts' | 'invalid-body' }>,
    firstOffset = 0,
  ): Promise<void> {
    await producer.send({
      topic: dlqTopic,
      acks: -1,
      messages: letters.map(({ id, reason }, i) => ({
        ...deadLetterRecord({
          topic,
          partition: 0,
          message: {
            key: Buffer.from(id),
            value: Buffer.from(JSON.stringify({ id })),
            headers: { 'message-id': id },
            offset: String(firstOffset + i),
            timestamp: String(Date.now()),
            attributes: 0,
          },
          consumer,
          reason: reason ?? 'max-attempts',
          detail: 'down',
          attempts: 5,
        }),
        partition: 0,
      })),
    });
  }

  function configOf(
    topic: string,
    overrides: Partial<ReturnType<typeof brokerOf>> & { deadLetterTopic?: string } = {},
  ) {
    return {
      name: `c-${topic}`,
      broker: { ...brokerOf(topic), ...overrides },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    } satisfies ConsumerConfig<Body>;
  }

  async function ledgerRows(consumer: string) {
    const { rows } = await db.store.transaction((tx) =>
      tx.query<{ state: string; message_id: string | null; partition: number; dlq_offset: string }>(
        `SELECT state, message_id, partition, dlq_offset::text AS dlq_offset FROM "${db.schema}".dead_letter_ledger
          WHERE consumer = $1 ORDER BY partition, dlq_offset`,
        [consumer],
      ),
    );
    return rows;
  }

  /**
   * A consumer whose handler throws while `broken.on` is set, and once more for each message
   * after the fix (a flaky dependency: a replayed message needs a fresh attempt budget);
   * effects are rows.
   */
  async function startConsumer(topic: string, broken: { on: boolean }) {
    const failedAfterFix = new Set<string>();
    const config: ConsumerConfig<Body> = {
      name: `c-${topic}`,
      broker: brokerOf(topic),
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
        await db.insertEffect(ctx.tx, { id: message.id, consumer: config.name });
      },
    };
    const consumer: Consumer<Body> = await createConsumer(config);
    const deadLettered: string[] = [];
    const duplicates: string[] = [];
    consumer.on('deadLettered', (event) => deadLettered.push(event.messageId ?? '?'));
    consumer.on('duplicate', (event) => duplicates.push(event.messageId!));
    await consumer.start();
    cleanups.push(() => consumer.stop());
    return { config, deadLettered, duplicates };
  }

  it('lists two failure groups, replays one once, no-ops the second replay, discards the other', async () => {
    const topic = uniqueName('dlq');
    await createTopic(admin, topic, 3);
    const broken = { on: true };
    const { config, deadLettered, duplicates } = await startConsumer(topic, broken);
    const failing = Array.from({ length: 25 }, (_, i) => `${topic}-fail-${i}`);
    const garbled = Array.from({ length: 25 }, (_, i) => `${topic}-bad-${i}`);
    await publish(
      producer,
      topic,
      failing.map((id) => ({ id, key: id, body: { id } })),
    );
    await producer.send({
      topic,
      acks: -1,
      messages: garbled.map((id, i) => ({
        key: id,
        value: `{"id": "${id}", broken ${i}`,
        headers: { 'message-id': id },
      })),
    });
    await until('50 dead letters', () => deadLettered.length === 50, 90_000);
    const dlqTopic = `${topic}.dlq`;
    const written = await ends(dlqTopic);

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
    expect(failed.attributes[DEAD_LETTER_HEADERS.reason]).toBeUndefined();
    expect(failed.attributes['message-id']).toBe(failing[0]);

    // Listing changed nothing: the same letters in the same order, the topic as it was.
    const again = await dlq.list();
    expect(again.letters.map((l) => l.messageId)).toEqual(listed.letters.map((l) => l.messageId));
    expect(await ends(dlqTopic)).toEqual(written);
    expect(await ledgerRows(config.name)).toEqual([]);

    expect(await findDeadLetters(config, failing[0]!)).toHaveLength(1);

    const dry = await dlq.replay({ group: byReason['max-attempts']!.id }, { dryRun: true });
    expect(dry).toMatchObject({ dryRun: true, alreadyProcessed: [], withoutId: 0 });
    expect([...dry.replayed].sort()).toEqual([...failing].sort());
    expect(await db.effectCounts()).toEqual(new Map());

    broken.on = false; // the fix is deployed
    const sourceBefore = await ends(topic);
    const replayed = await dlq.replay({ group: byReason['max-attempts']!.id });
    expect(replayed.replayed).toHaveLength(25);
    await until('25 effects', async () => (await db.effectCounts()).size === 25, 60_000);
    const effects = await db.effectCounts();
    expect([...effects.keys()].sort()).toEqual([...failing].sort());
    expect([...effects.values()].every((n) => n === 1)).toBe(true);
    // 25 copies went to the source; the dead-letter topic is unchanged, the ledger says replayed.
    const sourceAfter = await ends(topic);
    const sent = (list: string[]) => list.reduce((sum, p) => sum + Number(p.split(':')[1]), 0);
    expect(sent(sourceAfter) - sent(sourceBefore)).toBe(25);
    expect(await ends(dlqTopic)).toEqual(written);
    const rows = await ledgerRows(config.name);
    expect(
      rows
        .filter((r) => r.state === 'replayed')
        .map((r) => r.message_id)
        .sort(),
    ).toEqual([...failing].sort());

    // The group is no longer listed: replaying it again moves nothing.
    const second = await dlq.replay({ group: 'max-attempts' });
    expect(second).toMatchObject({
      replayed: [],
      alreadyProcessed: [],
      withoutId: 0,
      notFound: ['max-attempts'],
    });
    expect(sent(await ends(topic))).toBe(sent(sourceAfter));
    expect((await dlq.list()).letters).toHaveLength(25);

    // A pass that died between its intent and its record of the send leaves `replaying` rows.
    // One whose copy is in the source (from = the end before that send) is found, not re-sent;
    // one whose copy is not (from = the end now) is listed again and re-sent once.
    const ledger = (db.store as IdempotencyStore<unknown>).deadLetterLog!.ledger!;
    const entries = await ledger.entries(config.name, dlqTopic);
    const found = entries.find((e) => e.messageId === failing[3])!;
    const missing = entries.find((e) => e.messageId === failing[4])!;
    const now = Object.fromEntries(
      (await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, p.high] as const),
    );
    await ledger.put([
      { ...found, state: 'replaying', target: { ...found.target!, offset: undefined } },
      {
        ...missing,
        state: 'replaying',
        target: { topic, partition: missing.target!.partition, from: now[missing.target!.partition]! },
      },
    ]);
    const recovered = await dlq.list();
    expect(recovered.letters.filter((l) => l.reason === 'max-attempts').map((l) => l.messageId)).toEqual([
      failing[4],
    ]);
    const afterRecovery = await ledger.entries(config.name, dlqTopic);
    expect(afterRecovery.find((e) => e.messageId === failing[3])).toMatchObject({
      state: 'replayed',
      target: { offset: found.target!.offset },
    });
    expect(afterRecovery.some((e) => e.messageId === failing[4])).toBe(false);
    const dryCopy = await dlq.replay({ ids: [failing[4]!, 'nope'] }, { dryRun: true });
    expect(dryCopy).toMatchObject({ replayed: [], alreadyProcessed: [failing[4]], notFound: ['nope'] });
    await dlq.replay({ ids: [failing[4]!] });
    await until('the copy acked as a duplicate', () => duplicates.length === 1, 60_000);
    expect(duplicates).toEqual([failing[4]]);
    expect(sent(await ends(topic))).toBe(sent(sourceAfter) + 1);

    // Discard the other group: recorded first, then marked in the ledger.
    const discarded = await dlq.discard({ group: 'invalid-body' }, { by: 'tester' });
    expect(discarded.discarded).toHaveLength(25);
    expect((await dlq.list()).letters).toEqual([]);
    expect(await ends(dlqTopic)).toEqual(written); // the records are still there
    const { rows: discards } = await db.store.transaction((tx) =>
      tx.query<{ message_id: string; reason: string; discarded_by: string }>(
        `SELECT message_id, reason, discarded_by FROM "${db.schema}".dead_letter_discards WHERE consumer = $1`,
        [config.name],
      ),
    );
    expect(discards.map((r) => r.message_id).sort()).toEqual([...garbled].sort());
    expect(new Set(discards.map((r) => `${r.reason}/${r.discarded_by}`))).toEqual(
      new Set(['invalid-body/tester']),
    );
    const finalRows = await ledgerRows(config.name);
    expect(
      finalRows
        .filter((r) => r.state === 'discarded')
        .map((r) => r.message_id)
        .sort(),
    ).toEqual([...garbled].sort());
    expect(finalRows.filter((r) => r.state === 'replayed')).toHaveLength(25);

    // `oncely inspect` no longer reports a copy the ledger says was replayed or discarded
    // (it did, next to the discard record, saying the DLQ still held it).
    expect(await findDeadLetters(config, failing[0]!)).toEqual([]);
    expect(await findDeadLetters(config, garbled[0]!)).toEqual([]);

    // Still one effect each.
    const final = await db.effectCounts();
    expect(final.size).toBe(25);
    expect([...final.values()].every((n) => n === 1)).toBe(true);
  }, 240_000);

  it('refuses a second pass while one holds the lock, and a store without a ledger', async () => {
    const topic = uniqueName('dlqlock');
    await createTopic(admin, topic, 1);
    await createTopic(admin, `${topic}.dlq`, 1);
    const config: ConsumerConfig<Body> = {
      name: `c-${topic}`,
      broker: brokerOf(topic),
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    };
    const first = await openDeadLetters(config);
    cleanups.push(() => first.close());
    const started = Date.now();
    await expect((await DeadLetters.open(config)).list()).rejects.toBeInstanceOf(KafkaDeadLetterError);
    expect(Date.now() - started).toBeGreaterThanOrEqual(9_000); // it waited for the lock
    await first.close();
    expect((await (await DeadLetters.open(config)).list()).letters).toEqual([]);

    // No dead-letter topic: refused by name, before any lock is taken.
    await expect(
      openDeadLetters({ ...config, broker: { ...config.broker, deadLetterTopic: `${topic}.absent` } }),
    ).rejects.toBeInstanceOf(KafkaTopicMissingError);

    const withoutLedger = { ...db.store, deadLetterLog: { ...db.store.deadLetterLog, ledger: undefined } };
    await expect(
      openDeadLetters({ ...config, store: withoutLedger as unknown as IdempotencyStore<unknown> }),
    ).rejects.toSatisfy((error) => isOncelyError(error, 'CONFIG_INVALID'));
  }, 60_000);

  it('a re-send the broker refuses leaves the dead letter where it was', async () => {
    const topic = uniqueName('dlqgone');
    await createTopic(admin, topic, 1);
    await createTopic(admin, `${topic}.dlq`, 1);
    const config = configOf(topic);
    const ids = ['a', 'b', 'c'].map((n) => `${topic}-${n}`);
    await seedDeadLetters(
      `${topic}.dlq`,
      config.name,
      topic,
      ids.map((id) => ({ id })),
    );
    // An interrupted pass's intent towards the topic that is about to go.
    const first = (await (await DeadLetters.open(config)).list()).letters;
    expect(first.map((l) => l.messageId)).toEqual(ids);
    const ledger = db.store.deadLetterLog.ledger!;
    await ledger.put([
      {
        consumer: config.name,
        queue: `${topic}.dlq`,
        partition: 0,
        offset: '0',
        fingerprint: 'from-an-older-record',
        state: 'replaying',
        target: { topic, partition: 0, from: '0' },
        at: new Date(),
      },
    ]);
    await admin.deleteTopics({ topics: [topic] });
    const dlq = await DeadLetters.open(config);
    await expect(dlq.replay({})).rejects.toThrow();
    // Nothing sent, nothing marked: the letters are listed as before, the stale intent gone.
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(ids);
    expect(await ledgerRows(config.name)).toEqual([]);
  }, 120_000);

  it("shares a dead-letter topic: lists and moves only its own consumer's letters", async () => {
    const shared = uniqueName('dlqshared');
    const [topicA, topicB] = [`${shared}-a`, `${shared}-b`];
    for (const topic of [topicA, topicB, shared]) await createTopic(admin, topic, 1);
    const a = configOf(topicA, { deadLetterTopic: shared });
    const b = configOf(topicB, { deadLetterTopic: shared });
    await seedDeadLetters(shared, a.name, topicA, [{ id: 'a-1' }, { id: 'a-2' }]);
    await seedDeadLetters(shared, b.name, topicB, [{ id: 'b-1' }, { id: 'b-2' }]);
    // Not Oncely's: no oncely-consumer header.
    await producer.send({
      topic: shared,
      messages: [{ value: 'from elsewhere', headers: { 'message-id': 'x' } }],
    });
    const dlqA = await DeadLetters.open(a);
    const dlqB = await DeadLetters.open(b);
    expect((await dlqA.list()).letters.map((l) => l.messageId)).toEqual(['a-1', 'a-2']);
    expect((await dlqA.replay({})).replayed).toEqual(['a-1', 'a-2']);
    expect(await ends(topicA)).toEqual(['0:2']);
    expect(await ends(topicB)).toEqual(['0:0']);
    expect((await dlqA.list()).letters).toEqual([]);
    expect((await dlqB.list()).letters.map((l) => l.messageId)).toEqual(['b-1', 'b-2']);
    await dlqB.discard({ ids: ['b-2'] }, { by: 'tester' });
    expect((await dlqB.list()).letters.map((l) => l.messageId)).toEqual(['b-1']);
    expect((await ledgerRows(a.name)).map((r) => `${r.message_id}:${r.state}`)).toEqual([
      'a-1:replayed',
      'a-2:replayed',
    ]);
    expect((await ledgerRows(b.name)).map((r) => `${r.message_id}:${r.state}`)).toEqual(['b-2:discarded']);
  }, 120_000);

  it('forgets expired letters and does not match a recreated topic', async () => {
    const topic = uniqueName('dlqexpire');
    const dlqTopic = `${topic}.dlq`;
    await createTopic(admin, topic, 1);
    await createTopic(admin, dlqTopic, 1);
    const config = configOf(topic);
    await seedDeadLetters(
      dlqTopic,
      config.name,
      topic,
      ['m-0', 'm-1', 'm-2', 'm-3'].map((id) => ({ id })),
    );
    const dlq = await DeadLetters.open(config);
    await dlq.discard({ ids: ['m-0', 'm-1'] }, { by: 'tester' });
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(['m-2', 'm-3']);
    // Retention removed the first record: its row goes, the rest stay.
    await admin.deleteTopicRecords({ topic: dlqTopic, partitions: [{ partition: 0, offset: '1' }] });
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(['m-2', 'm-3']);
    expect((await ledgerRows(config.name)).map((r) => `${r.dlq_offset}:${r.state}`)).toEqual(['1:discarded']);

    // The topic is deleted and created again: new letters at the same offsets are not the
    // ones the ledger speaks of.
    await admin.deleteTopics({ topics: [dlqTopic] });
    await until(
      'the dead-letter topic deleted',
      async () => !(await admin.listTopics()).includes(dlqTopic),
      60_000,
    );
    await createTopic(admin, dlqTopic, 1);
    await seedDeadLetters(
      dlqTopic,
      config.name,
      topic,
      ['n-0', 'n-1'].map((id) => ({ id })),
      10,
    );
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(['n-0', 'n-1']);
    expect(await ledgerRows(config.name)).toEqual([]);
  }, 120_000);

  it('replays in offsets mode under the original ID, finds a late copy, and stops where the source expired', async () => {
    const topic = uniqueName('dlqoffsets');
    await createTopic(admin, topic, 1);
    const broken = { on: true };
    const name = `c-${topic}`;
    const config: ConsumerConfig<Body> = {
      name,
      broker: brokerOf(topic),
      store: db.store,
      logger: silentLogger,
      mode: 'offsets',
      maxAttempts: 1,
      handler: async (message, ctx) => {
        if (broken.on) throw new Error('down');
        await db.insertEffect(ctx.tx, { id: message.id, consumer: name });
      },
    };
    const consumer = await createConsumer(config);
    let deadLettered = 0;
    consumer.on('deadLettered', () => deadLettered++);
    await consumer.start();
    cleanups.push(() => consumer.stop());
    // No message-id: in offsets mode a record is named by its topic/partition/offset.
    await publish(
      producer,
      topic,
      [0, 1, 2].map((n) => ({ body: { id: `n-${n}` } })),
    );
    await until('3 dead letters', () => deadLettered === 3, 60_000);
    const ids = [0, 1, 2].map((n) => `${topic}/0/${n}`);
    const dlq = await DeadLetters.open(config);
    expect((await dlq.list()).letters.map((l) => l.messageId)).toEqual(ids);

    broken.on = false;
    await dlq.replay({ ids: [ids[0]!, ids[1]!] });
    // The copies sit at offsets 3 and 4, yet are applied under the original IDs.
    await until(
      '2 effects',
      async () => (await db.rows()).filter((r) => r.consumer === name).length === 2,
      60_000,
    );
    expect((await db.rows()).filter((r) => r.consumer === name).map((r) => r.message_id)).toEqual([
      ids[0],
      ids[1],
    ]);
    await consumer.stop();

    // A pass killed after its send, whose copy the broker had not made visible yet: the next
    // pass waits (offsets mode: no marker would absorb a second copy) and finds it.
    // The third letter is replayed (its row holds the real fingerprint), then the test turns
    // the row back into an unconfirmed intent whose copy is not in the source yet.
    const ledger = db.store.deadLetterLog.ledger!;
    expect((await dlq.replay({ ids: [ids[2]!] })).replayed).toEqual([ids[2]]);
    const done = (await ledger.entries(name, `${topic}.dlq`)).find((e) => e.messageId === ids[2])!;
    const from = String((await admin.fetchTopicOffsets(topic))[0]!.high);
    await ledger.put([
      {
        ...done,
        state: 'replaying',
        target: { topic, partition: 0, from },
        at: new Date(Date.now() - 27_000),
      },
    ]);
    // Another record after `from`, so that the pass's first look scans the partition (and
    // its scan group shows it has looked).
    await producer.send({ topic, acks: -1, messages: [{ partition: 0, value: 'unrelated' }] });
    const scanGroups = async () =>
      (await admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g.startsWith(`${name}-dlq-`));
    const before = new Set(await scanGroups());
    const started = Date.now();
    const listing = dlq.list();
    // Its first look in the source has begun (its scan group exists; the end offset it reads
    // to was taken before): the copy written now lies beyond it, as a late one would.
    await until(
      'the first recovery scan',
      async () => (await scanGroups()).some((g) => !before.has(g)),
      20_000,
    );
    await producer.send({
      topic,
      acks: -1,
      messages: [
        {
          partition: 0,
          value: JSON.stringify({ id: 'n-2' }),
          headers: {
            'message-id': ids[2]!,
            [DEAD_LETTER_HEADERS.replayOf]: `${topic}.dlq/0/${done.offset}#${done.fingerprint.slice(0, 8)}`,
          },
        },
      ],
    });
    expect((await listing).letters).toEqual([]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_000);
    expect((await ledger.entries(name, `${topic}.dlq`)).find((e) => e.messageId === ids[2])).toMatchObject({
      state: 'replayed',
      target: { offset: String(BigInt(from) + 1n) }, // after the unrelated record
    });

    // The source's retention removed records above an old intent's `from`: whether its copy
    // was among them cannot be told, and offsets mode has no marker to absorb a re-send.
    const end = BigInt((await admin.fetchTopicOffsets(topic))[0]!.high);
    await ledger.put([
      {
        ...done,
        state: 'replaying',
        target: { topic, partition: 0, from: String(end - 1n) },
        at: new Date(Date.now() - 60_000),
      },
    ]);
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: String(end) }] });
    await expect(dlq.list()).rejects.toThrow(
      /cannot tell whether 1 dead letter\(s\) of an interrupted replay/,
    );
    expect((await ledger.entries(name, `${topic}.dlq`)).find((e) => e.messageId === ids[2])).toMatchObject({
      state: 'replaying',
    });
  }, 120_000);
});
