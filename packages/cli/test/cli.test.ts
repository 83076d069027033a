import { processOnce } from '@oncely/core';
import { LATEST_VERSION, PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main, parseDuration } from '../src/index.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `cli_${process.pid}_${Date.now()}`;

async function run(
  ...args: Array<string | Record<string, string>>
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const argv = args.filter((a): a is string => typeof a === 'string');
  const extraEnv = args.find((a): a is Record<string, string> => typeof a !== 'string');
  const code = await main(argv, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { DATABASE_URL, ...extraEnv },
  });
  return { code, out, err };
}

afterAll(async () => {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
});

describe('oncely CLI on the real PostgreSQL', () => {
  beforeAll(async () => {
    const doctor = await run('doctor', '--schema', schema);
    expect(doctor.code).toBe(1);
    expect(doctor.out).toMatch(
      /^error store: schema "cli_.*" is not migrated: call store.migrate\(\) \(or run `oncely migrate`\) first$/m,
    );
    expect(doctor.out.match(/oncely migrate/g)).toHaveLength(1);
  });

  it('migrates once, then reports up to date', async () => {
    const first = await run('migrate', '--schema', schema);
    expect(first).toMatchObject({ code: 0 });
    expect(first.out).toMatch(/^applied 0001/);
    expect((await run('migrate', '--schema', schema)).out).toMatch(
      new RegExp(`^up to date \\(version ${LATEST_VERSION}\\)`),
    );
    const doctor = await run('doctor', '--schema', schema);
    expect(doctor.code).toBe(0);
    expect(doctor.out).toContain(
      `ok    store: database answers, schema '${schema}' at version ${LATEST_VERSION}`,
    );
  });

  it('shows stats and one message, and prunes old markers', async () => {
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
    for (const id of ['m-1', 'm-2', 'm-3'])
      await processOnce(store, { consumer: 'payments', messageId: id }, async () => {});
    await store.recordAttempt({ consumer: 'payments', messageId: 'm-1' });
    await store.close();

    const stats = await run('stats', '--schema', schema);
    expect(stats.out).toMatch(/payments\s+completed\s+3/);
    expect(stats.out).toMatch(/payments\s+1\s+0/);

    const inspect = await run('inspect', 'payments', 'm-2', '--schema', schema);
    expect(inspect.code).toBe(0);
    expect(JSON.parse(inspect.out)).toMatchObject({
      consumer: 'payments',
      messageId: 'm-2',
      marker: { status: 'completed' },
    });
    expect(JSON.parse(inspect.out).explanation).toMatch(/^processed at \d{4}-.*: its effect committed/);
    const unknown = await run('inspect', 'payments', 'nope', '--schema', schema);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.out)).toMatchObject({
      marker: null,
      attempts: null,
      explanation: expect.stringMatching(
        /^no trace in the store: never received by this consumer, running for the first time now/,
      ),
    });

    expect((await run('prune', '--older-than', '1d', '--schema', schema)).out).toMatch(/^deleted 0 markers/);
    // The dry run counts what would go, deletes nothing.
    const dry = await run('prune', '--older-than', '0s', '--force', '--dry-run', '--schema', schema);
    expect(dry).toMatchObject({
      code: 0,
      out: 'would delete 3 markers processed more than 0s ago (dry run)\n',
    });
    expect((await run('stats', '--schema', schema)).out).toMatch(/payments\s+completed\s+3/);
    // Under the minimum age: refused without --force, and nothing deleted.
    const young = await run('prune', '--older-than', '0s', '--schema', schema);
    expect(young.code).toBe(2);
    expect(young.err).toContain('--older-than 0s is under the minimum of 1h (ONCELY_PRUNE_MIN_AGE)');
    expect((await run('stats', '--schema', schema)).out).toMatch(/payments\s+completed\s+3/);
    // Batches of 2, with progress on stderr.
    const pruned = await run(
      'prune',
      '--older-than',
      '0s',
      '--force',
      '--batch-size',
      '2',
      '--schema',
      schema,
    );
    expect(pruned).toMatchObject({ code: 0, out: 'deleted 3 markers processed more than 0s ago\n' });
    expect(pruned.err).toBe('pruned 2 of 3 markers (67%)\npruned 3 of 3 markers (100%)\n');
    expect((await run('stats', '--schema', schema)).out).not.toMatch(/completed/);
  });

  it('doctor: checks the retention and the lease limit from the config, exits 1 on an error', async () => {
    const env = {
      ONCELY_NAME: 'doctor',
      ONCELY_BROKER_TYPE: 'memory',
      ONCELY_BROKER_QUEUE: `doctor_${process.pid}`,
    };
    const healthy = await run('doctor', '--schema', schema, '--retention', '14d', env);
    expect(healthy.out).toContain("ok    retention 14d covers memory's redelivery horizon (0ms)");
    expect(healthy.code).toBe(0);
    const rabbit = {
      ONCELY_NAME: 'doctor',
      ONCELY_BROKER_TYPE: 'rabbitmq',
      ONCELY_BROKER_URL: process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672',
      ONCELY_BROKER_QUEUE: `doctor_${process.pid}_${Date.now()}`,
      ONCELY_HANDLER_TIMEOUT_MS: String(40 * 60_000),
    };
    const slow = await run('doctor', '--schema', schema, '--retention', '3d', rabbit);
    expect(slow.out).toMatch(/^error handlerTimeoutMs 2400000 exceeds RabbitMQ's default consumer_timeout/m);
    expect(slow.out).toMatch(/^warn {2}retention 3d: rabbitmq has no redelivery horizon of its own/m);
    expect(slow.code).toBe(1);
    expect(await run('doctor', '--schema', schema, '--retention', '3', env)).toMatchObject({
      code: 2,
      err: expect.stringContaining('needs a unit'),
    });
    expect(await run('doctor', '--schema', schema, { ...env, ONCELY_CONCURENCY: '4' })).toMatchObject({
      code: 2,
      err: expect.stringContaining('did you mean ONCELY_CONCURRENCY?'),
    });
  });

  it('inspect: explains a message without a marker: retried, dead-lettered, in progress', async () => {
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
    try {
      await store.recordAttempt({ consumer: 'orders', messageId: 'flaky' });
      for (let i = 0; i < 5; i++) await store.recordAttempt({ consumer: 'orders', messageId: 'poison' });
      const claim = await store.acquireLease({ consumer: 'orders', messageId: 'slow' }, 60_000);
      expect(claim).toMatchObject({ status: 'acquired' });
    } finally {
      await store.close();
    }
    const explain = async (id: string, env: Record<string, string> = {}) =>
      JSON.parse((await run('inspect', 'orders', id, '--schema', schema, env)).out).explanation as string;
    expect(await explain('flaky')).toMatch(
      /^not processed yet: 1 failed run\(s\) of 5, the last at .*: waiting for its retry/,
    );
    expect(await explain('poison')).toMatch(
      /^not processed: 5 failed runs \(maxAttempts 5\), .*dead-lettered with reason 'max-attempts'; read the broker's dead-letter queue/,
    );
    expect(await explain('poison', { ONCELY_MAX_ATTEMPTS: '8' })).toMatch(
      /^not processed yet: 5 failed run\(s\) of 8/,
    );
    expect(await explain('slow')).toMatch(/^in progress \(leased mode\): held by .* until \d{4}-/);
    expect(await run('inspect', 'orders', '--schema', schema)).toMatchObject({
      code: 2,
      err: expect.stringContaining('needs CONSUMER and MESSAGE_ID'),
    });
  });

  it('rejects bad usage with exit code 2 and a reason', async () => {
    expect(await run()).toMatchObject({ code: 2 });
    expect(await run('explode')).toMatchObject({
      code: 2,
      err: expect.stringContaining("unknown command 'explode'"),
    });
    expect(await run('prune', '--schema', schema)).toMatchObject({
      code: 2,
      err: expect.stringContaining('--older-than is required'),
    });
    expect(await run('prune', '--older-than', '14', '--schema', schema)).toMatchObject({
      code: 2,
      err: expect.stringContaining("'14' needs a unit: 14d, 14h"),
    });
    expect(await run('prune', '--older-than', 'two weeks', '--schema', schema)).toMatchObject({
      code: 2,
      err: expect.stringContaining('is not a duration'),
    });
    expect(await run('prune', '--older-than', '14d', '--batch-size', '0', '--schema', schema)).toMatchObject({
      code: 2,
      err: expect.stringContaining('--batch-size must be a positive integer'),
    });
    expect(
      await run('prune', '--older-than', '3h', '--dry-run', '--schema', schema, {
        ONCELY_PRUNE_MIN_AGE: '7d',
      }),
    ).toMatchObject({ code: 2, err: expect.stringContaining('under the minimum of 7d') });
    expect(await run('stats', '--schema', 'bad"name')).toMatchObject({
      code: 2,
      err: expect.stringContaining('schema'),
    });
    expect(await run('stats', '--bogus')).toMatchObject({
      code: 2,
      err: expect.stringContaining("Unknown option '--bogus'"),
    });
  });
});

describe('parseDuration', () => {
  it('reads units and rejects nonsense', () => {
    expect(parseDuration('14d')).toBe(14 * 86_400_000);
    expect(parseDuration('90m')).toBe(5_400_000);
    expect(parseDuration('500ms')).toBe(500);
    expect(() => parseDuration('250')).toThrow(/needs a unit/);
    expect(() => parseDuration('two weeks')).toThrow(/not a duration/);
  });
});
