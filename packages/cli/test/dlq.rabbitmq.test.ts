import { randomUUID } from 'node:crypto';
import { PostgresStore } from '@oncely/postgres';
import { assertTopology, DETAIL_HEADER, REASON_HEADER } from '@oncely/rabbitmq';
import { connect } from 'amqplib';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

// `oncely dlq list|replay|discard` against real RabbitMQ and PostgreSQL. The dead letters
// are published straight into the DLQ with the headers the adapter writes; the consumer
// side (effects counted once) is packages/rabbitmq/test/deadLetters.test.ts.
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const suffix = randomUUID().replace(/-/g, '').slice(0, 10);
const schema = `cli_dlq_${suffix}`;
const queue = `cli_dlq_${suffix}`;

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

describe('oncely dlq on RabbitMQ', () => {
  const connectionPromise = connect(RABBITMQ_URL);

  beforeAll(async () => {
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
    await store.migrate();
    await store.close();
    const connection = await connectionPromise;
    const channel = await connection.createConfirmChannel();
    await assertTopology(channel, { queue });
    for (let i = 0; i < 6; i++) {
      const poison = i % 2 === 0;
      channel.sendToQueue(`${queue}.dlq`, Buffer.from(poison ? `{broken ${i}` : `{"n":${i}}`), {
        messageId: `m-${i}`,
        persistent: true,
        headers: poison
          ? {
              [REASON_HEADER]: 'invalid-body',
              [DETAIL_HEADER]: `Unexpected token b in JSON at position ${i}`,
            }
          : { [REASON_HEADER]: 'max-attempts', [DETAIL_HEADER]: 'failed 5 times; last error: timeout' },
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
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
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

  it('lists failure groups, refuses bad usage, replays a group, discards with a record', async () => {
    const listed = await oncely(['list', 'payments', '--json']);
    expect(listed).toMatchObject({ code: 0, err: '' });
    const { groups, letters } = JSON.parse(listed.out);
    expect(letters.map((l: { messageId: string }) => l.messageId)).toEqual([
      'm-0',
      'm-1',
      'm-2',
      'm-3',
      'm-4',
      'm-5',
    ]);
    expect(groups.map((g: { reason: string; count: number }) => [g.reason, g.count]).sort()).toEqual([
      ['invalid-body', 3],
      ['max-attempts', 3],
    ]);
    const text = await oncely(['list', 'payments']);
    expect(text.out).toMatch(/^group\s+count\s+last failure\s+error/);
    expect(await depth(`${queue}.dlq`)).toBe(6);

    expect((await oncely(['discard', 'payments', '--group', 'invalid-body'])).code).toBe(2);
    expect((await oncely(['replay', 'payments', '--group', 'x', '--id', 'm-1'])).code).toBe(2);
    expect((await oncely(['purge', 'payments'])).code).toBe(2);
    expect((await oncely(['list'])).code).toBe(2);
    expect(await depth(`${queue}.dlq`)).toBe(6);

    const dry = await oncely(['replay', 'payments', '--group', 'max-attempts', '--dry-run']);
    expect(dry).toMatchObject({ code: 0 });
    expect(dry.out).toContain('would replay 3 not yet processed: m-1, m-3, m-5');
    expect(await depth(queue)).toBe(0);

    const missing = await oncely(['replay', 'payments', '--id', 'm-1', '--id', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.err).toContain('not in the dead-letter queue: nope');
    const rest = await oncely(['replay', 'payments', '--group', 'max-attempts']);
    expect(rest).toMatchObject({ code: 0 });
    expect(rest.out).toContain('replayed 2 not yet processed: m-3, m-5');
    expect(await depth(queue)).toBe(3);
    expect(await depth(`${queue}.dlq`)).toBe(3);

    const discarded = await oncely(['discard', 'payments', '--group', 'invalid-body', '--yes']);
    expect(discarded).toMatchObject({ code: 0 });
    expect(discarded.out).toContain('discarded 3 (recorded as by alice): m-0, m-2, m-4');
    expect(await depth(`${queue}.dlq`)).toBe(0);

    let out = '';
    await main(['inspect', 'payments', 'm-2', '--schema', schema], {
      out: { write: (t: string) => (out += t) },
      err: { write: () => {} },
      env: { DATABASE_URL },
    });
    const report = JSON.parse(out);
    expect(report.discards[0]).toMatchObject({ reason: 'invalid-body', discardedBy: 'alice' });
    expect(report.explanation).toContain('Discarded from the dead-letter queue by alice');
  }, 60_000);
});
