import { userInfo } from 'node:os';
import { parseArgs } from 'node:util';
import { type DeadLetterSelection, isOncelyError } from '@oncely/core';
import { type OutboxFailureGroup, PostgresStore, type StuckOutboxRow } from '@oncely/postgres';
import { UsageError } from './duration.js';
import type { CliIo } from './main.js';
import { closeCliStore } from './stores.js';

/** The `oncely outbox` section of the usage text. */
export const OUTBOX_USAGE = `  outbox [--limit 20] [--json]    the outbox relay's lag, pending and dead-lettered rows, the
                                  dead-lettered rows' failure groups (destination and error,
                                  numbers masked) and the rows that failed at least once
  outbox --retry                  send dead-lettered rows again (a group or a destination,
        [--group G | --id ID ...  these IDs, or all: the default; safe, consumers deduplicate
         | ID ... | --all]        by the row's ID); --dry-run: which would be retried
        [--dry-run]
  outbox --discard --yes          never send these dead-lettered rows: they stay in the outbox
        --group G | --id ID ...   as 'discarded' with who ($ONCELY_OPERATOR or the OS user) and
        | --all                   when; every row only with --all. --retry and --discard exit 1
                                  when an ID or group is not dead-lettered; 2 on bad usage
`;

/** What `readOutboxArgs` read for `oncely outbox`. */
export interface OutboxArguments {
  action: 'list' | 'retry' | 'discard';
  selection: DeadLetterSelection;
  dryRun: boolean;
  json: boolean;
  limit: number;
}

/**
 * Checks `oncely outbox` options before the store is opened. Throws a UsageError: both
 * --retry and --discard, a selection or --dry-run/--yes without either, an empty ID or
 * --group, two of --group, IDs and --all, --dry-run on --discard, --discard without --yes
 * or a selection.
 *
 * @example
 * ```ts
 * readOutboxArgs([], { retry: true, group: 'receipts:c338c400' }); // { action: 'retry', ... }
 * ```
 */
export function readOutboxArgs(
  positionals: string[],
  values: {
    limit?: string;
    retry?: boolean;
    discard?: boolean;
    id?: string[];
    group?: string;
    all?: boolean;
    'dry-run'?: boolean;
    yes?: boolean;
    json?: boolean;
  },
): OutboxArguments {
  if (values.retry && values.discard) throw new UsageError('--retry and --discard exclude each other');
  const action = values.retry ? 'retry' : values.discard ? 'discard' : 'list';
  // `--retry ID ...` (IDs as arguments) predates --id; both are accepted, together too.
  const ids = positionals.length > 0 || values.id ? [...(values.id ?? []), ...positionals] : undefined;
  // '' names no row: it would only come back as "not dead-lettered" (exit 1), a typo
  // reported as a finding (an unset shell variable: `--id "$ID"`).
  if (values.id?.includes('')) throw new UsageError("--id needs a row ID; got ''");
  if (action !== 'list' && positionals.includes(''))
    throw new UsageError(`--${action} needs row IDs; got ''`);
  if (values.group === '') throw new UsageError("--group needs a group or a destination; got ''");
  if (action === 'list') {
    if (positionals.length > 0) {
      throw new UsageError(`unexpected argument '${positionals[0]}' (IDs go after --retry or --discard)`);
    }
    const stray = (['id', 'group', 'all', 'dry-run', 'yes'] as const).find((o) => values[o] !== undefined);
    if (stray) throw new UsageError(`--${stray} goes with --retry or --discard`);
  }
  const selections = [ids !== undefined, values.group !== undefined, values.all === true].filter(Boolean);
  if (selections.length > 1) throw new UsageError('--group, IDs (--id) and --all exclude each other');
  if (action === 'discard') {
    if (values['dry-run']) throw new UsageError('--discard takes no --dry-run');
    if (!values.yes) throw new UsageError('--discard never sends these rows: pass --yes');
    // As `dlq discard`: a forgotten or mistyped selection must not discard everything.
    if (selections.length === 0) {
      throw new UsageError('--discard needs a selection: --group G, --id ID ... or, for every row, --all');
    }
  }
  if (action === 'retry' && values.yes) throw new UsageError('--retry takes no --yes');
  const limit = values.limit === undefined ? 20 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1) {
    throw new UsageError(`--limit must be a positive integer; got ${values.limit}`);
  }
  return {
    action,
    selection: {
      ...(ids ? { ids } : {}),
      ...(values.group !== undefined ? { group: values.group } : {}),
      ...(values.all === true ? { all: true } : {}),
    },
    dryRun: values['dry-run'] ?? false,
    json: values.json ?? false,
    limit,
  };
}

/**
 * `oncely outbox`: the relay's lag (the oldest unsent row's age), pending and
 * dead-lettered counts, the dead-lettered rows' failure groups, the stuck rows with their
 * last error; `--retry` puts dead-lettered rows back to pending, `--discard` drops them
 * for good with a record. Exit codes: 0 ok; 1 the command failed, or an ID or group is not
 * dead-lettered; 2 bad usage.
 *
 * @example
 * ```ts
 * await outboxCommand(['--retry', '--group', 'receipts:c338c400'], { out: process.stdout, err: process.stderr, env: process.env });
 * ```
 */
export async function outboxCommand(argv: string[], io: CliIo): Promise<number> {
  let args: OutboxArguments;
  let values: { 'database-url'?: string; schema?: string };
  try {
    const parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        'database-url': { type: 'string' },
        schema: { type: 'string' },
        limit: { type: 'string' },
        retry: { type: 'boolean' },
        discard: { type: 'boolean' },
        id: { type: 'string', multiple: true },
        group: { type: 'string' },
        all: { type: 'boolean' },
        'dry-run': { type: 'boolean' },
        yes: { type: 'boolean' },
        json: { type: 'boolean' },
      },
    });
    values = parsed.values;
    args = readOutboxArgs(parsed.positionals, parsed.values);
  } catch (error) {
    io.err.write(`oncely outbox: ${(error as Error).message}\n`);
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
  let code: number;
  try {
    code = await runOutbox(store, args, io);
  } catch (error) {
    io.err.write(`oncely outbox: ${error instanceof Error ? error.message : String(error)}\n`);
    code = isOncelyError(error, 'CONFIG_INVALID') ? 2 : 1;
  }
  return closeCliStore(store, code, 'oncely outbox', io);
}

async function runOutbox(store: PostgresStore, args: OutboxArguments, io: CliIo): Promise<number> {
  if (args.action === 'retry') {
    const report = await store.outbox.retryDeadLetters(args.selection, { dryRun: args.dryRun });
    if (args.json) io.out.write(`${JSON.stringify(report, null, 2)}\n`);
    else {
      const count = `${report.retried.length} dead-lettered row(s)`;
      const what = report.dryRun ? `would retry ${count}` : `${count} back to pending`;
      io.out.write(`${what}${list(report.retried)}\n`);
    }
    return notFound(report.notFound, io);
  }
  if (args.action === 'discard') {
    const by = io.env.ONCELY_OPERATOR || safeUser();
    const report = await store.outbox.discard(args.selection, { by });
    if (args.json) io.out.write(`${JSON.stringify(report, null, 2)}\n`);
    else
      io.out.write(
        `${report.discarded.length} dead-lettered row(s) discarded (recorded as by ${by})${list(report.discarded)}\n`,
      );
    return notFound(report.notFound, io);
  }
  const stats = await store.outbox.stats();
  const { groups } = await store.outbox.deadLetters();
  const stuck = await store.outbox.stuck({ limit: args.limit });
  if (args.json) {
    io.out.write(`${JSON.stringify({ stats, groups, stuck }, null, 2)}\n`);
    return 0;
  }
  io.out.write(
    `pending ${stats.pending}  dead-lettered ${stats.failed}  lag ${stats.lagMs === null ? '-' : formatMs(stats.lagMs)}\n\n`,
  );
  io.out.write(`${groupTable(groups)}\n${stuckTable(stuck)}`);
  return 0;
}

function groupTable(groups: OutboxFailureGroup[]): string {
  const rows = groups.map((g) => [
    g.id,
    String(g.count),
    g.destination,
    g.ids.slice(0, 5).join(', ') + (g.ids.length > 5 ? `, ... (${g.ids.length - 5} more)` : ''),
    g.error.replace(/\s+/g, ' ').slice(0, 80),
  ]);
  return table(['group', 'count', 'destination', 'ids', 'error'], rows, '(no dead-lettered rows)');
}

function stuckTable(stuck: StuckOutboxRow[]): string {
  const rows = stuck.map((row) => [
    row.id,
    row.destination,
    row.key ?? '',
    row.status === 'failed' ? 'dead-lettered' : 'retrying',
    String(row.attempts),
    (row.lastError ?? '').replace(/\s+/g, ' ').slice(0, 80),
  ]);
  return table(['id', 'destination', 'key', 'status', 'attempts', 'last error'], rows, '(no stuck rows)');
}

function list(ids: string[]): string {
  if (ids.length === 0) return '';
  return `: ${ids.slice(0, 20).join(', ')}${ids.length > 20 ? `, ... (${ids.length - 20} more)` : ''}`;
}

function notFound(selected: string[], io: CliIo): number {
  if (selected.length === 0) return 0;
  io.err.write(`not dead-lettered (or unknown): ${selected.join(', ')}\n`);
  return 1;
}

function safeUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'unknown';
  }
}

function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${(ms / 60_000).toFixed(1)} min`;
}

function table(headers: string[], rows: string[][], empty: string): string {
  const cells = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join('\n')}\n${rows.length ? '' : `${empty}\n`}`;
}
