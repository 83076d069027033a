import { randomUUID } from 'node:crypto';
import { processOnce } from '@oncely/core';
import { MySqlStore } from '@oncely/mysql';
import { requireService } from '@oncely/testkit';
import mysql from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/index.js';

const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const schema = `cli_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
const admin = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 2 });
const hasMySql = await requireService('MariaDB', () => admin.query('DO 0'));

async function run(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(args, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
    env: { ONCELY_STORE_URL: MYSQL_URL },
  });
  return { code, out, err };
}

afterAll(async () => {
  await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``);
  await admin.end();
});

describe.skipIf(!hasMySql)('oncely CLI on the real MariaDB (ONCELY_STORE_URL=mysql://...)', () => {
  it('doctor refuses an unmigrated database; migrate, stats, inspect and prune work on it', async () => {
    const before = await run('doctor', '--schema', schema);
    expect(before.code).toBe(1);
    expect(before.out).toMatch(/error store: database `cli_\w+` has no Oncely tables: .*oncely migrate/);

    expect((await run('migrate', '--schema', schema)).out).toBe(
      'applied 0001_init, 0002_http_idempotency_keys, 0003_dead_letter_discards, 0004_dead_letter_ledger; schema version 4\n',
    );
    expect((await run('migrate', '--schema', schema)).out).toBe('up to date (version 4)\n');
    const doctor = await run('doctor', '--schema', schema);
    expect(doctor.code).toBe(0);
    expect(doctor.out).toContain(`ok    store: database answers, schema '${schema}' is up to date`);

    const store = new MySqlStore({ url: MYSQL_URL, schema });
    for (const id of ['a', 'b', 'c'])
      await processOnce(store, { consumer: 'payments', messageId: id }, async () => {});
    await store.recordAttempt({ consumer: 'payments', messageId: 'retried' });
    await store.recordAttempt({ consumer: 'payments', messageId: 'retried' });
    await store.close();

    const stats = await run('stats', '--schema', schema);
    expect(stats.out).toMatch(/payments\s+completed\s+3/);
    expect(stats.out).toMatch(/payments\s+1\s+1/);

    const shown = await run('inspect', 'payments', 'b', '--schema', schema);
    expect(shown.code).toBe(0);
    const parsed = JSON.parse(shown.out);
    expect(parsed.marker.status).toBe('completed');
    expect(parsed.explanation).toMatch(/^processed at \d{4}-/);
    const retried = await run('inspect', 'payments', 'retried', '--schema', schema);
    expect(retried.code).toBe(1);
    expect(JSON.parse(retried.out).explanation).toMatch(/2 failed run\(s\) of 5/);

    const dry = await run('prune', '--older-than', '1ms', '--force', '--dry-run', '--schema', schema);
    expect(dry.out).toBe('would delete 3 markers processed more than 1ms ago (dry run)\n');
    const pruned = await run(
      'prune',
      '--older-than',
      '1ms',
      '--force',
      '--batch-size',
      '2',
      '--schema',
      schema,
    );
    expect(pruned.out).toBe('deleted 3 markers processed more than 1ms ago\n');
    expect((await run('stats', '--schema', schema)).out).not.toMatch(/completed/);
  });

  it('refuses the outbox commands and a URL it cannot use, with exit code 2', async () => {
    const outbox = await run('outbox', '--schema', schema);
    expect(outbox.code).toBe(2);
    expect(outbox.err).toContain('the MySQL store (@oncely/mysql) has no transactional outbox');
    const bad = await run('stats', '--database-url', 'mysql://', '--schema', schema);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/url must (name a host|be a URL)/);
  });
});
