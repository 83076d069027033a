import { parseArgs } from 'node:util';
import { isOncelyError } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import type { CliIo } from './main.js';

/** The `oncely outbox` section of the usage text. */
export const OUTBOX_USAGE = `  outbox [--limit 20]             the outbox relay's lag, pending and dead-lettered rows,
                                  and the rows that failed at least once
  outbox --retry [ID ...]         send dead-lettered rows again (all of them, or these IDs)
`;

/**
 * `oncely outbox`: the relay's lag (the oldest unsent row's age), pending and
 * dead-lettered counts, the stuck rows with their last error; `--retry` puts dead-lettered
 * rows back to pending. Exit codes: 0 ok, 1 the command failed, 2 bad usage.
 *
 * @example
 * ```ts
 * await outboxCommand(['--retry', 'payments:order-7:1'], { out: process.stdout, err: process.stderr, env: process.env });
 * ```
 */
export async function outboxCommand(args: string[], io: CliIo): Promise<number> {
  let values: { 'database-url'?: string; schema?: string; limit?: string; retry?: boolean };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: {
        'database-url': { type: 'string' },
        schema: { type: 'string' },
        limit: { type: 'string' },
        retry: { type: 'boolean' },
      },
    }));
  } catch (error) {
    io.err.write(`oncely outbox: ${(error as Error).message}\n`);
    return 2;
  }
  if (positionals.length > 0 && !values.retry) {
    io.err.write(`oncely outbox: unexpected argument '${positionals[0]}' (IDs go after --retry)\n`);
    return 2;
  }
  const limit = values.limit === undefined ? 20 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1) {
    io.err.write(`oncely outbox: --limit must be a positive integer; got ${values.limit}\n`);
    return 2;
  }
  const connectionString = values['database-url'] ?? (io.env.DATABASE_URL || io.env.ONCELY_STORE_URL);
  if (!connectionString) {
    io.err.write('oncely outbox: no database: pass --database-url or set DATABASE_URL\n');
    return 2;
  }
  if (/^(mysql|mariadb):/i.test(connectionString)) {
    io.err.write('oncely outbox: the MySQL store (@oncely/mysql) has no transactional outbox\n');
    return 2;
  }
  const schema = values.schema ?? io.env.ONCELY_SCHEMA ?? 'oncely';
  let store: PostgresStore;
  try {
    store = new PostgresStore({ connectionString, schema });
  } catch (error) {
    io.err.write(`oncely outbox: ${(error as Error).message}\n`);
    return 2;
  }
  try {
    if (values.retry) {
      const retried = await store.outbox.retry(positionals.length > 0 ? positionals : undefined);
      io.out.write(
        `${retried.length} dead-lettered row(s) back to pending${retried.length ? `: ${retried.join(', ')}` : ''}\n`,
      );
      const missing = positionals.filter((id) => !retried.includes(id));
      if (missing.length > 0) io.err.write(`not dead-lettered (or unknown): ${missing.join(', ')}\n`);
      return missing.length > 0 ? 1 : 0;
    }
    const stats = await store.outbox.stats();
    io.out.write(
      `pending ${stats.pending}  dead-lettered ${stats.failed}  lag ${stats.lagMs === null ? '-' : formatMs(stats.lagMs)}\n\n`,
    );
    const stuck = await store.outbox.stuck({ limit });
    const rows = stuck.map((row) => [
      row.id,
      row.destination,
      row.key ?? '',
      row.status === 'failed' ? 'dead-lettered' : 'retrying',
      String(row.attempts),
      (row.lastError ?? '').replace(/\s+/g, ' ').slice(0, 80),
    ]);
    io.out.write(table(['id', 'destination', 'key', 'status', 'attempts', 'last error'], rows));
    return 0;
  } catch (error) {
    io.err.write(`oncely outbox: ${error instanceof Error ? error.message : String(error)}\n`);
    return isOncelyError(error, 'CONFIG_INVALID') ? 2 : 1;
  } finally {
    await store.close();
  }
}

function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${(ms / 60_000).toFixed(1)} min`;
}

function table(headers: string[], rows: string[][]): string {
  const cells = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join('\n')}\n${rows.length ? '' : '(no stuck rows)\n'}`;
}
