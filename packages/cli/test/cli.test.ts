import { processOnce } from '@oncely/core';
import { LATEST_VERSION, PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main, parseDuration } from '../src/index.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `cli_${process.pid}_${Date.now()}`;

async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { DATABASE_URL },
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
    expect(doctor.out).toMatch(/^error store: .*run oncely migrate/m);
  });

  it('migrates once, then reports up to date', async () => {
    const first = await run('migrate', '--schema', schema);
    expect(first).toMatchObject({ code: 0 });
    expect(first.out).toMatch(/^applied 0001/);
    expect((await run('migrate', '--schema', schema)).out).toContain(
      `up to date (version ${LATEST_VERSION})`,
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
    expect((await run('inspect', 'payments', 'nope', '--schema', schema)).code).toBe(1);

    expect((await run('prune', '--older-than', '1d', '--schema', schema)).out).toMatch(/^deleted 0 markers/);
    expect((await run('prune', '--older-than', '0', '--batch-size', '2', '--schema', schema)).out).toMatch(
      /^deleted 3 markers/,
    );
    expect((await run('stats', '--schema', schema)).out).not.toMatch(/completed/);
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
    expect(parseDuration('250')).toBe(250);
    expect(() => parseDuration('two weeks')).toThrow(/not a duration/);
  });
});
