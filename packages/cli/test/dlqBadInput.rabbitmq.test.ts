import { randomUUID } from 'node:crypto';
import { PostgresStore } from '@oncely/postgres';
import { assertTopology, DETAIL_HEADER, REASON_HEADER } from '@oncely/rabbitmq';
import { connect } from 'amqplib';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

// Hostile review of `oncely dlq` (#30): bad input must be refused or reported, never turn
// into a silent no-op (exit 0) or an action under the wrong consumer's name.
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const suffix = randomUUID().replace(/-/g, '').slice(0, 10);
const schema = `cli_dlqbad_${suffix}`;
const queue = `cli_dlqbad_${suffix}`;

async function oncely(args: string[], extraEnv: Record<string, string> = {}) {
  let out = '';
  let err = '';
  const code = await main(['dlq', ...args, '--schema', schema], {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: {
      DATABASE_URL,
      ONCELY_BROKER_TYPE: 'rabbitmq',
      ONCELY_BROKER_URL: RABBITMQ_URL,
      ONCELY_BROKER_QUEUE: queue,
      ONCELY_OPERATOR: 'alice',
      ...extraEnv,
    },
  });
  return { code, out, err };
}

describe('oncely dlq: bad input (real RabbitMQ + PostgreSQL)', () => {
  const connectionPromise = connect(RABBITMQ_URL);
  const admin = new pg.Client({ connectionString: DATABASE_URL });

  beforeAll(async () => {
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
    await store.migrate();
    await store.close();
    await admin.connect();
    const channel = await (await connectionPromise).createConfirmChannel();
    await assertTopology(channel, { queue });
    for (let i = 0; i < 3; i++) {
      channel.sendToQueue(`${queue}.dlq`, Buffer.from(`{"n":${i}}`), {
        messageId: `m-${i}`,
        persistent: true,
        headers: { [REASON_HEADER]: 'max-attempts', [DETAIL_HEADER]: 'timeout' },
      });
    }
    await channel.waitForConfirms();
    await channel.close();
  });

  afterAll(async () => {
    const connection = await connectionPromise;
    const channel = await connection.createChannel();
    for (const name of [queue, `${queue}.dlq`]) await channel.deleteQueue(name).catch(() => {});
    await channel.deleteExchange(`${queue}.dlx`).catch(() => {});
    await connection.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  async function depth(name: string): Promise<number> {
    const channel = await (await connectionPromise).createChannel();
    try {
      return (await channel.checkQueue(name)).messageCount;
    } finally {
      await channel.close();
    }
  }

  async function discardRows(): Promise<number> {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".dead_letter_discards`,
    );
    return rows[0]!.n;
  }

  it('a --group that matches no dead letter is reported (exit 1), like an --id that is not there', async () => {
    const replay = await oncely(['replay', 'payments', '--group', 'max-attempts:deadbeef']);
    expect(replay.code).toBe(1);
    expect(replay.err).toContain('max-attempts:deadbeef');
    const discard = await oncely(['discard', 'payments', '--group', 'max-atempts', '--yes']);
    expect(discard.code).toBe(1);
    expect(discard.err).toContain('max-atempts');
    expect(await depth(`${queue}.dlq`)).toBe(3);
    expect(await depth(queue)).toBe(0);
    expect(await discardRows()).toBe(0);
  }, 60_000);

  it('a CONSUMER other than the one the config names is refused (exit 2): markers and records would go under the wrong name', async () => {
    const typo = await oncely(['replay', 'paymnets', '--dry-run'], { ONCELY_NAME: 'payments' });
    expect(typo.code).toBe(2);
    expect(typo.err).toContain("'payments'");
    const discard = await oncely(['discard', 'paymnets', '--all', '--yes'], { ONCELY_NAME: 'payments' });
    expect(discard.code).toBe(2);
    expect(await depth(`${queue}.dlq`)).toBe(3);
    expect(await discardRows()).toBe(0);
    // The same name is fine.
    expect((await oncely(['list', 'payments'], { ONCELY_NAME: 'payments' })).code).toBe(0);
  }, 60_000);

  it('a dead-letter queue that does not exist: exit 1 naming it; list --json of an empty DLQ parses', async () => {
    const gone = await oncely(['list', 'payments'], { ONCELY_BROKER_QUEUE: `${queue}-nothere` });
    expect(gone.code).toBe(1);
    expect(gone.err).toContain(`${queue}-nothere.dlq`);
    const emptyQueue = `${queue}_empty`;
    const channel = await (await connectionPromise).createConfirmChannel();
    await assertTopology(channel, { queue: emptyQueue });
    await channel.close();
    try {
      const empty = await oncely(['list', 'payments', '--json'], { ONCELY_BROKER_QUEUE: emptyQueue });
      expect(empty.code).toBe(0);
      expect(JSON.parse(empty.out)).toEqual({ letters: [], groups: [] });
    } finally {
      const cleanup = await (await connectionPromise).createChannel();
      for (const name of [emptyQueue, `${emptyQueue}.dlq`]) await cleanup.deleteQueue(name).catch(() => {});
      await cleanup.deleteExchange(`${emptyQueue}.dlx`).catch(() => {});
      await cleanup.close();
    }
  }, 60_000);

  // Last: its success path empties the DLQ.
  it('discard with no selection is refused (exit 2, nothing removed): everything takes an explicit --all', async () => {
    const forgotten = await oncely(['discard', 'payments', '--yes']);
    expect(forgotten.code).toBe(2);
    expect(forgotten.err).toContain('--all');
    expect(await depth(`${queue}.dlq`)).toBe(3);
    expect(await discardRows()).toBe(0);
    // --all is a selection of its own: not with --group or --id, not on list.
    expect((await oncely(['discard', 'payments', '--all', '--group', 'max-attempts', '--yes'])).code).toBe(2);
    expect((await oncely(['replay', 'payments', '--all', '--id', 'm-0'])).code).toBe(2);
    expect((await oncely(['list', 'payments', '--all'])).code).toBe(2);
    // Replay keeps its default (everything; IDs kept, markers absorb copies) and takes --all too.
    const dry = await oncely(['replay', 'payments', '--all', '--dry-run']);
    expect(dry.code).toBe(0);
    expect(await depth(`${queue}.dlq`)).toBe(3);
    const all = await oncely(['discard', 'payments', '--all', '--yes']);
    expect(all.code).toBe(0);
    expect(all.out).toContain('discarded 3');
    expect(await depth(`${queue}.dlq`)).toBe(0);
    expect(await discardRows()).toBe(3);
  }, 60_000);

  it('a replay the broker refuses part-way says what moved and what failed, then exits 1', async () => {
    // A work queue that takes one message (reject-publish): the second and third re-sends
    // are nacked. Its own queue, so the other cases keep their three dead letters.
    const full = `${queue}_full`;
    const connection = await connectionPromise;
    const channel = await connection.createConfirmChannel();
    await channel.assertQueue(full, {
      durable: true,
      arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' },
    });
    await channel.assertQueue(`${full}.dlq`, { durable: true });
    for (let i = 0; i < 3; i++) {
      channel.sendToQueue(`${full}.dlq`, Buffer.from(`{"n":${i}}`), {
        messageId: `f-${i}`,
        persistent: true,
        headers: { [REASON_HEADER]: 'max-attempts', [DETAIL_HEADER]: 'timeout' },
      });
    }
    await channel.waitForConfirms();
    try {
      const env = { ONCELY_BROKER_QUEUE: full };
      const refused = await oncely(['replay', 'payments'], env);
      expect(refused.code).toBe(1);
      expect(refused.err).toMatch(
        /replay stopped: 1 moved back, 2 failed: f-\d: .+, f-\d: .+, 0 not attempted/,
      );
      expect(await depth(full)).toBe(1);
      expect(await depth(`${full}.dlq`)).toBe(2);
      // --json: the partial report on standard output, as a report would be.
      await channel.purgeQueue(full);
      const json = await oncely(['replay', 'payments', '--json'], env);
      expect(json.code).toBe(1);
      const partial = JSON.parse(json.out);
      expect(partial.replayed).toHaveLength(1);
      expect(partial.failed).toHaveLength(1);
      expect(partial.notAttempted).toBe(0);
      expect(await depth(`${full}.dlq`)).toBe(1);
    } finally {
      for (const name of [full, `${full}.dlq`]) await channel.deleteQueue(name).catch(() => {});
      await channel.close();
    }
  }, 60_000);
});
