import { parseArgs } from 'node:util';
import type { BrokerType, DiagnoseFinding } from '@oncely/core';
import { isOncelyError, loadAdapterModule, loadConfig } from '@oncely/core';
import { type DlqArguments, dlqCommand, readDlqArgs } from './dlq.js';
import { type CheckedConfig, leaseLimitFindings, retentionFindings } from './doctorChecks.js';
import { durationOption, UsageError } from './duration.js';
import { type InspectTarget, inspect } from './inspect.js';
import { outboxCommand } from './outbox.js';
import { type PruneOptions, prune, readPruneArgs } from './prune.js';
import { type CliStore, closeCliStore, type OpenedStore, openCliStore } from './stores.js';
import { asksForHelp, COMMAND_USAGE, commandUsage, USAGE } from './usage.js';

/** Where the CLI writes, and the environment it reads (injectable for tests). */
export interface CliIo {
  out: { write(text: string): unknown };
  err: { write(text: string): unknown };
  env: Record<string, string | undefined>;
}

/**
 * Exit codes: 0 ok, 1 a check or command failed (`inspect`: no marker; `dlq replay|discard`:
 * an `--id` not in the DLQ; a store that failed to close after a command that succeeded),
 * 2 bad usage (`dlq discard` without `--yes` or without a selection (`--group`, `--id` or
 * `--all`) included). Never rejects: every failure is printed and answered with a code.
 */
export async function main(argv: string[], io: CliIo): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === '--help' || command === '-h' || command === 'help') {
    const topic = command === 'help' ? rest[0] : undefined;
    if (topic !== undefined && COMMAND_USAGE[topic] === undefined) {
      io.err.write(`oncely help: unknown command '${topic}'\n\n${USAGE}`);
      return 2;
    }
    io.out.write(topic === undefined ? USAGE : commandUsage(topic));
    return command ? 0 : 2;
  }
  if (COMMAND_USAGE[command] === undefined) {
    io.err.write(`oncely: unknown command '${command}'\n\n${USAGE}`);
    return 2;
  }
  if (asksForHelp(rest)) {
    io.out.write(commandUsage(command));
    return 0;
  }
  if (command === 'outbox') return outboxCommand(rest, io);
  let parsed: ReturnType<typeof parse>;
  let checked: CheckedArguments;
  try {
    parsed = parse(rest);
    // Usage is checked before the store is opened: a typo is named as such, with or
    // without a database to connect to.
    checked = checkArguments(command, parsed.values, parsed.positionals, io);
  } catch (error) {
    io.err.write(`oncely ${command}: ${(error as Error).message}\n\n${commandUsage(command)}`);
    return 2;
  }
  const { values } = parsed;
  const connectionString = values['database-url'] ?? (io.env.DATABASE_URL || io.env.ONCELY_STORE_URL);
  const schema = values.schema ?? io.env.ONCELY_SCHEMA ?? 'oncely';
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
  let code: number;
  try {
    switch (command) {
      case 'migrate':
        code = await migrate(store, io);
        break;
      case 'prune':
        code = await prune(store, checked.prune!, values, io);
        break;
      case 'stats':
        code = await stats(opened, values.consumer, io);
        break;
      case 'inspect':
        code = await inspect(opened, checked.target!, io, values.config);
        break;
      case 'dlq':
        code = await dlqCommand(opened, checked.dlq!, io, values.config);
        break;
      default:
        code = await doctor(opened, schema, values, io);
    }
  } catch (error) {
    io.err.write(`oncely ${command}: ${describe(error)}\n`);
    // DeadLetters attaches a dead-letter session that failed to close as well (letters it
    // could not give back, hidden until their lease lapses) to the pass's error.
    const closeError = (error as { closeError?: unknown } | null)?.closeError;
    if (closeError !== undefined)
      io.err.write(`oncely ${command}: closing the dead-letter queue failed too: ${describe(closeError)}\n`);
    code = error instanceof UsageError || isOncelyError(error, 'CONFIG_INVALID') ? 2 : 1;
  }
  return closeCliStore(store, code, `oncely ${command}`, io);
}

/** What checkArguments read, so each command uses it as checked rather than reading it again. */
interface CheckedArguments {
  /** `inspect`'s CONSUMER and MESSAGE_ID. */
  target?: InspectTarget;
  /** `prune`'s age, its text and the batch size. */
  prune?: PruneOptions;
  /** `dlq`'s action, consumer and selection. */
  dlq?: DlqArguments;
}

/** Throws a UsageError naming the first malformed argument of a store command. */
function checkArguments(
  command: string,
  values: ReturnType<typeof parse>['values'],
  positionals: string[],
  io: CliIo,
): CheckedArguments {
  if (command === 'dlq') return { dlq: readDlqArgs(positionals, values) };
  const expected = command === 'inspect' ? 2 : 0;
  if (command === 'inspect' && positionals.length < expected)
    throw new UsageError('needs CONSUMER and MESSAGE_ID');
  if (positionals.length > expected) throw new UsageError(`unexpected argument '${positionals[expected]}'`);
  if (values.retention !== undefined) durationOption('--retention', values.retention);
  if (command === 'inspect') {
    // An empty name or ID names nothing the store holds: a usage error, not "no marker".
    const [consumer, messageId] = positionals as [string, string];
    if (consumer === '') throw new UsageError("CONSUMER must not be empty; got ''");
    if (messageId === '') throw new UsageError("MESSAGE_ID must not be empty; got ''");
    return { target: { consumer, messageId } };
  }
  if (command === 'prune') return { prune: readPruneArgs(values, io.env) };
  return {};
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
      json: { type: 'boolean' },
      group: { type: 'string' },
      id: { type: 'string', multiple: true },
      all: { type: 'boolean' },
      yes: { type: 'boolean' },
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
  const retentionMs =
    values.retention === undefined ? undefined : durationOption('--retention', values.retention);
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
    // Through unknown: once an adapter package's module augmentation is in the program, the
    // broker section is that adapter's union, which the checks read only loosely.
    const checked = config as unknown as CheckedConfig;
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
