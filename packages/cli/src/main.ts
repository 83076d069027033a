import { parseArgs } from 'node:util';
import type { BrokerType, DiagnoseFinding } from '@oncely/core';
import { isOncelyError, loadAdapterModule, loadConfig } from '@oncely/core';
import { type CheckedConfig, leaseLimitFindings, retentionFindings } from './doctorChecks.js';
import { parseDuration, UsageError } from './duration.js';
import { inspect } from './inspect.js';
import { OUTBOX_USAGE, outboxCommand } from './outbox.js';
import { prune } from './prune.js';
import { type CliStore, type OpenedStore, openCliStore } from './stores.js';

/** Where the CLI writes, and the environment it reads (injectable for tests). */
export interface CliIo {
  out: { write(text: string): unknown };
  err: { write(text: string): unknown };
  env: Record<string, string | undefined>;
}

const USAGE = `usage: oncely <command> [options]

commands:
  migrate                         apply pending schema migrations
  prune --older-than 14d          delete completed markers older than that (in batches;
        [--batch-size 1000]       the age needs a unit: d, h, m, s or ms)
        [--consumer NAME]
        [--dry-run]               print how many markers would go, delete nothing
        [--force]                 allow an age under $ONCELY_PRUNE_MIN_AGE (default 1h)
  stats [--consumer NAME]         markers per consumer and status, attempt counters
  inspect CONSUMER MESSAGE_ID     one message's marker and attempt counter, and what they
        [--config FILE]           mean (processed, in progress, retried, dead-lettered);
                                  with a broker config, what its DLQ holds (Service Bus)
  doctor [--config FILE]          check the store, the broker (the adapter's diagnose()),
        [--retention 14d]         handlerTimeoutMs against the broker's lease limit, and
                                  the prune age against the broker's redelivery horizon
${OUTBOX_USAGE}

common options:
  --database-url URL              default: $DATABASE_URL, else $ONCELY_STORE_URL;
                                  postgres://... (@oncely/postgres) or mysql://...
                                  (@oncely/mysql, MySQL 8.0+ / MariaDB 10.6+)
  --schema NAME                   default: $ONCELY_SCHEMA or 'oncely' (MySQL: the database)
`;

/** Exit codes: 0 ok, 1 a check or command failed, 2 bad usage. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === '--help' || command === '-h' || command === 'help') {
    io.out.write(USAGE);
    return command ? 0 : 2;
  }
  if (command === 'outbox') return outboxCommand(rest, io);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(rest);
  } catch (error) {
    io.err.write(`oncely ${command}: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  const connectionString = values['database-url'] ?? (io.env.DATABASE_URL || io.env.ONCELY_STORE_URL);
  const schema = values.schema ?? io.env.ONCELY_SCHEMA ?? 'oncely';
  const needsStore = ['migrate', 'prune', 'stats', 'inspect', 'doctor'].includes(command);
  if (!needsStore) {
    io.err.write(`oncely: unknown command '${command}'\n\n${USAGE}`);
    return 2;
  }
  if (!connectionString) {
    io.err.write(`oncely ${command}: no database: pass --database-url or set DATABASE_URL\n`);
    return 2;
  }
  let opened: OpenedStore;
  try {
    opened = await openCliStore(connectionString, schema);
  } catch (error) {
    io.err.write(`oncely ${command}: ${describe(error)}\n`);
    return 2;
  }
  const { store } = opened;
  try {
    switch (command) {
      case 'migrate':
        return await migrate(store, io);
      case 'prune':
        return await prune(store, values, io);
      case 'stats':
        return await stats(opened, values.consumer, io);
      case 'inspect':
        return await inspect(opened, positionals, io, values.config);
      default:
        return await doctor(opened, schema, values, io);
    }
  } catch (error) {
    io.err.write(`oncely ${command}: ${describe(error)}\n`);
    return error instanceof UsageError || isOncelyError(error, 'CONFIG_INVALID') ? 2 : 1;
  } finally {
    await store.close();
  }
}

function parse(args: string[]) {
  return parseArgs({
    args,
    allowPositionals: true,
    options: {
      'database-url': { type: 'string' },
      schema: { type: 'string' },
      'older-than': { type: 'string' },
      'batch-size': { type: 'string' },
      'dry-run': { type: 'boolean' },
      force: { type: 'boolean' },
      consumer: { type: 'string' },
      config: { type: 'string' },
      retention: { type: 'string' },
    },
  });
}

async function migrate(store: CliStore, io: CliIo): Promise<number> {
  const { applied, version } = await store.migrate();
  io.out.write(
    applied.length
      ? `applied ${applied.join(', ')}; schema version ${version}\n`
      : `up to date (version ${version})\n`,
  );
  return 0;
}

async function stats(
  { store, queries }: OpenedStore,
  consumer: string | undefined,
  io: CliIo,
): Promise<number> {
  const withConsumer = consumer !== undefined;
  const params = withConsumer ? [consumer] : [];
  const { markers, attempts } = await store.transaction(async (tx) => ({
    markers: (
      await tx.query<{ consumer: string; status: string; n: number; oldest: Date; newest: Date }>(
        queries.markerStats(withConsumer),
        params,
      )
    ).rows,
    attempts: (
      await tx.query<{ consumer: string; n: number; retried: number }>(
        queries.attemptStats(withConsumer),
        params,
      )
    ).rows,
  }));
  io.out.write(
    table(
      ['consumer', 'status', 'markers', 'oldest', 'newest'],
      markers.map((r) => [r.consumer, r.status, r.n, iso(r.oldest), iso(r.newest)]),
    ),
  );
  io.out.write(
    table(
      ['consumer', 'attempt counters', 'retried'],
      attempts.map((r) => [r.consumer, r.n, r.retried]),
    ),
  );
  return 0;
}

async function doctor(
  { store, latestVersion }: OpenedStore,
  schema: string,
  values: { config?: string; retention?: string },
  io: CliIo,
): Promise<number> {
  const configFile = values.config;
  const retentionMs = values.retention === undefined ? undefined : parseDuration(values.retention);
  const findings: DiagnoseFinding[] = [];
  try {
    // ping() runs the store's version guard: a missing, old or newer schema throws.
    await store.ping();
    findings.push({
      level: 'ok',
      message:
        latestVersion === undefined
          ? `store: database answers, schema '${schema}' is up to date`
          : `store: database answers, schema '${schema}' at version ${latestVersion}`,
    });
  } catch (error) {
    // The error's own message already says how to fix it (`oncely migrate`, upgrade, ...).
    findings.push({ level: 'error', message: `store: ${describe(error)}` });
  }
  if (configFile !== undefined || io.env.ONCELY_CONFIG_FILE || io.env.ONCELY_BROKER_TYPE) {
    const config = loadConfig({ env: io.env, file: configFile });
    const checked = config as CheckedConfig;
    findings.push(...leaseLimitFindings(checked), ...retentionFindings(checked, retentionMs));
    const module = await loadAdapterModule(config.broker.type as BrokerType);
    if (module.diagnose) {
      const report = await module.diagnose({ ...config, store, handler: async () => {} });
      findings.push(...report.findings.map((f) => ({ ...f, message: `${report.broker}: ${f.message}` })));
    } else {
      findings.push({ level: 'warn', message: `${config.broker.type}: the adapter has no diagnose()` });
    }
  } else {
    findings.push({
      level: 'warn',
      message: 'broker: not checked (pass --config FILE or set ONCELY_BROKER_TYPE)',
    });
  }
  for (const finding of findings) io.out.write(`${finding.level.padEnd(5)} ${finding.message}\n`);
  return findings.some((f) => f.level === 'error') ? 1 : 0;
}

function table(headers: string[], rows: Array<Array<string | number>>): string {
  const cells = [headers, ...rows.map((r) => r.map(String))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...cells.slice(1).map(line)].join('\n')}\n${rows.length ? '' : '(none)\n'}\n`;
}

function iso(value: Date | string | null): string {
  return value === null ? '' : new Date(value).toISOString();
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
