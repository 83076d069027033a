/**
 * Two members of one consumer group, each a child process; one is SIGKILLed in the
 * middle of its batches (records applied in PostgreSQL, their offsets not yet committed
 * to Kafka). The survivor takes the partitions over after the dead member's session
 * times out: every record's effect must exist exactly once, in both processing modes.
 *
 * - transactional: the survivor gets the dead member's applied-but-uncommitted records
 *   again and skips them through the processed-ID table (duplicate events).
 * - offsets: the survivor seeks past / skips what the store says was applied, and the
 *   conditional upsert refuses anything the dead member already applied.
 * - transactional with `batch`: the victim dies with batches of a partition's records
 *   in flight (one transaction each); the survivor skips the ones that committed.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ProcessingMode } from '@oncely/core';
import type { Admin, Producer } from 'kafkajs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTopic,
  DATABASE_URL,
  groupLag,
  kafkaClient,
  publish,
  testBrokers,
  uniqueName,
} from './support/kafka.js';
import { createTestStore, type TestStore, until } from './support/store.js';

const brokers = testBrokers();
const memberScript = fileURLToPath(new URL('./support/groupMember.mjs', import.meta.url));

interface Member {
  label: string;
  child: ChildProcess;
  processed: string[];
  duplicates: string[];
  output: () => string;
  exited: Promise<number | null>;
}

function startMember(label: string, plan: Record<string, unknown>): Member {
  const child = fork(memberScript, [], {
    env: { ...process.env, ONCELY_KAFKA_MEMBER: JSON.stringify({ ...plan, label }) },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let output = '';
  child.stdout?.on('data', (chunk) => (output += chunk));
  child.stderr?.on('data', (chunk) => (output += chunk));
  const member: Member = {
    label,
    child,
    processed: [],
    duplicates: [],
    output: () => output,
    exited: new Promise((resolve) => child.once('exit', (code) => resolve(code))),
  };
  child.on('message', (message: { type: string; id?: string; message?: string }) => {
    if (message.type === 'processed' && message.id) member.processed.push(message.id);
    if (message.type === 'duplicate' && message.id) member.duplicates.push(message.id);
    if (message.type === 'error') output += `\n[child error] ${message.message}`;
  });
  return member;
}

function ready(member: Member): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${member.label} not ready:\n${member.output()}`)),
      30_000,
    );
    member.child.on('message', (message: { type: string }) => {
      if (message.type === 'ready') {
        clearTimeout(timer);
        resolve();
      }
      if (message.type === 'error') {
        clearTimeout(timer);
        reject(new Error(`${member.label} failed:\n${member.output()}`));
      }
    });
  });
}

describe.skipIf(!brokers)('rebalance: a group member SIGKILLed mid-batch', () => {
  let admin: Admin;
  let producer: Producer;
  let db: TestStore;
  let passed = true;
  const members: Member[] = [];

  beforeAll(async () => {
    const kafka = kafkaClient(brokers!, 'oncely-rebalance-test');
    admin = kafka.admin();
    producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    await Promise.all([admin.connect(), producer.connect()]);
    db = await createTestStore('oncely_kafka_rebalance');
  });

  afterEach(async (context) => {
    if (context.task.result?.state === 'fail') {
      passed = false;
      for (const m of members) console.error(`--- ${m.label} output ---\n${m.output()}`);
    }
    for (const m of members.splice(0)) if (m.child.exitCode === null) m.child.kill('SIGKILL');
  });

  afterAll(async () => {
    await Promise.allSettled([admin?.disconnect(), producer?.disconnect()]);
    await db?.close(passed);
  });

  it.each<{ label: string; mode: ProcessingMode; batch?: number }>([
    { label: 'transactional mode', mode: 'transactional' },
    { label: 'offsets mode', mode: 'offsets' },
    { label: 'transactional mode with batch', mode: 'transactional', batch: 10 },
  ])('$label: the survivor takes over, every record applied exactly once', async ({ mode, batch }) => {
    const topic = uniqueName(`rebalance-${mode}`);
    const name = uniqueName(`rebalance-${mode}-consumer`);
    await createTopic(admin, topic, 4);
    const plan = {
      brokers,
      topic,
      groupId: name,
      name,
      mode,
      databaseUrl: DATABASE_URL,
      schema: db.schema,
      table: db.table,
      sessionTimeout: 3000,
      // With batch: room for a batch of each of the member's partitions at once.
      ...(batch ? { batch, concurrency: batch * 2 } : { concurrency: 2 }),
      handlerDelayMs: 15,
      // Commits only when a batch ends: the victim dies holding applied, uncommitted records.
      commitIntervalMs: 60_000,
      maxLifetimeMs: 110_000,
    };
    // The victim stops at 20 records (its later handlers hold): it dies holding applied,
    // uncommitted records even when a loaded machine delays the kill below (it used to run
    // on and commit its batches first).
    const victim = startMember('victim', { ...plan, holdAfter: 20 });
    members.push(victim);
    await ready(victim);
    const survivor = startMember('survivor', plan);
    members.push(survivor);
    await ready(survivor);

    const ids = Array.from({ length: 300 }, (_, n) => `${mode}${batch ? '-batch' : ''}-${n}`);
    await publish(
      producer,
      topic,
      ids.map((id, n) => ({ id, body: { n }, partition: n % 4 })),
    );
    await until(
      'both members applying records',
      () => victim.processed.length >= 20 && survivor.processed.length >= 5,
    );
    victim.child.kill('SIGKILL');
    await victim.exited;
    const victimApplied = (await db.rows()).filter(
      (r) => r.consumer === 'victim' && ids.includes(r.message_id),
    );
    expect(victimApplied.length, 'records the victim applied before it died').toBeGreaterThanOrEqual(20);

    await until(
      'every record applied',
      async () => {
        const counts = await db.effectCounts();
        return ids.every((id) => counts.has(id));
      },
      60_000,
    );
    await until(
      'the group to commit everything',
      async () => (await groupLag(admin, name, topic)) === 0,
      30_000,
    );
    const counts = await db.effectCounts();
    const wrong = ids.filter((id) => counts.get(id) !== 1).map((id) => `${id}=${counts.get(id)}`);
    expect(wrong, 'records without exactly one effect').toEqual([]);
    const rows = (await db.rows()).filter((r) => ids.includes(r.message_id));
    const survivorTookOver = rows.filter(
      (r) => r.consumer === 'survivor' && victimApplied.some((v) => v.partition === r.partition),
    );
    expect(
      survivorTookOver.length,
      "records the survivor applied on the victim's partitions",
    ).toBeGreaterThan(0);
    if (mode === 'transactional') {
      // The victim's applied-but-uncommitted records came back and were skipped.
      const redelivered = survivor.duplicates.filter((id) => victimApplied.some((v) => v.message_id === id));
      expect(
        redelivered.length,
        "the victim's uncommitted records redelivered as duplicates",
      ).toBeGreaterThan(0);
    } else {
      const ends = await admin.fetchTopicOffsets(topic);
      expect(Object.fromEntries(await db.store.offsets.read(name, topic))).toEqual(
        Object.fromEntries(ends.map((e) => [e.partition, e.high])),
      );
    }
    survivor.child.send({ type: 'stop' });
    expect(await survivor.exited, 'survivor exit code after a graceful stop').toBe(0);
  });
});
