import { userInfo } from 'node:os';
import {
  completedPassOf,
  type DeadLetterInfo,
  type DeadLetterSelection,
  DeadLetters,
  type FailureGroup,
  loadConfig,
  replayReportOf,
} from '@oncely/core';
import { UsageError } from './duration.js';
import type { CliIo } from './main.js';
import type { OpenedStore } from './stores.js';

/** The `oncely dlq` section of the usage text. */
export const DLQ_USAGE = `  dlq list CONSUMER [--json]      the consumer's dead letters in failure groups (reason and
        [--config FILE]           error), each with its ID, last error, attempts, failure time
  dlq replay CONSUMER             move dead letters back to the consumer's queue under their
        [--group G | --id ID ...  original IDs (a group or a reason, these IDs, or all: the
         | --all] [--dry-run]     default), each removed only after the broker confirmed the
                                  re-send; --dry-run: which are processed already, which would run
  dlq discard CONSUMER --yes      remove dead letters for good, recorded first in the store
        --group G | --id ID ...   (ID, reason, who: $ONCELY_OPERATOR or the OS user, when);
        | --all                   every dead letter only with --all; exit 1 when an --id or
                                  --group is not in the DLQ; 2 without --yes or a selection,
                                  or when the config names another consumer
`;

/** What `checkArguments` read for `oncely dlq`. */
export interface DlqArguments {
  action: 'list' | 'replay' | 'discard';
  consumer: string;
  selection: DeadLetterSelection;
  json: boolean;
  dryRun: boolean;
}

/**
 * Checks `dlq ACTION CONSUMER` and its options before the store is opened. Throws a
 * UsageError: unknown action, a missing consumer, an empty `--id` or `--group`, two of
 * `--group`, `--id` and `--all`, a selection on `list`, `discard` without `--yes` or
 * without a selection.
 *
 * @example
 * ```ts
 * readDlqArgs(['replay', 'payments'], { group: 'max-attempts' }); // { action: 'replay', ... }
 * ```
 */
export function readDlqArgs(
  positionals: string[],
  values: {
    group?: string;
    id?: string[];
    all?: boolean;
    json?: boolean;
    'dry-run'?: boolean;
    yes?: boolean;
  },
): DlqArguments {
  const [action, consumer, extra] = positionals;
  if (action !== 'list' && action !== 'replay' && action !== 'discard') {
    throw new UsageError(
      action === undefined ? 'needs list, replay or discard' : `unknown action '${action}'`,
    );
  }
  if (consumer === undefined) throw new UsageError(`${action} needs CONSUMER`);
  if (extra !== undefined) throw new UsageError(`unexpected argument '${extra}'`);
  const ids = values.id;
  // '' names no dead letter: it would only come back as "not in the DLQ" (exit 1), a typo
  // reported as a finding (an unset shell variable: `--id "$ID"`).
  if (ids?.includes('')) throw new UsageError("--id needs a message ID; got ''");
  if (values.group === '') throw new UsageError("--group needs a group or a reason; got ''");
  const selections = [ids !== undefined, values.group !== undefined, values.all === true].filter(Boolean);
  if (action === 'list' && selections.length > 0) {
    throw new UsageError('list takes no --group, --id or --all (it shows everything)');
  }
  if (selections.length > 1) throw new UsageError('--group, --id and --all exclude each other');
  if (action !== 'replay' && values['dry-run']) throw new UsageError(`${action} takes no --dry-run`);
  if (action === 'discard' && !values.yes) {
    throw new UsageError('discard removes dead letters for good: pass --yes');
  }
  // A forgotten or mistyped --group/--id must not wipe the DLQ: everything is asked for by
  // name. Replay keeps "no selection is all": it loses nothing (IDs kept, markers absorb
  // copies already processed).
  if (action === 'discard' && selections.length === 0) {
    throw new UsageError(
      'discard needs a selection: --group G, --id ID ... or, to discard every dead letter, --all',
    );
  }
  return {
    action,
    consumer,
    selection: {
      ...(ids ? { ids } : {}),
      ...(values.group !== undefined ? { group: values.group } : {}),
      ...(values.all === true ? { all: true } : {}),
    },
    json: values.json ?? false,
    dryRun: values['dry-run'] ?? false,
  };
}

/**
 * `oncely dlq list|replay|discard CONSUMER`: the consumer's config (`--config FILE` or
 * `ONCELY_*` variables, as `doctor` reads it) names the broker; the consumer name is
 * CONSUMER (a config that names another consumer is refused). Exit codes: 0 ok; 1 the
 * command failed, or an `--id` or `--group` is not in the DLQ; 2 bad usage.
 */
export async function dlqCommand(
  { store }: OpenedStore,
  args: DlqArguments,
  io: CliIo,
  configFile?: string,
): Promise<number> {
  if (configFile === undefined && !io.env.ONCELY_CONFIG_FILE && !io.env.ONCELY_BROKER_TYPE) {
    throw new UsageError('needs the consumer config: pass --config FILE or set ONCELY_BROKER_TYPE');
  }
  const named = configuredName(io, configFile);
  if (named !== undefined && named !== args.consumer) {
    // Markers, attempt counters and discard records are per consumer name: under a typo
    // the dry run would call everything unprocessed and the records would go astray.
    throw new UsageError(
      `the config names consumer '${named}', not '${args.consumer}': pass the consumer the config is for`,
    );
  }
  // CONSUMER names the consumer when the config does not (its markers, its counters).
  const config = loadConfig({ env: { ...io.env, ONCELY_NAME: args.consumer }, file: configFile });
  const dlq = await DeadLetters.open({ ...config, name: args.consumer, store, handler: async () => {} });
  if (args.action === 'list') {
    await printed(dlq.list(), (listing) =>
      io.out.write(args.json ? `${JSON.stringify(listing, null, 2)}\n` : listText(listing)),
    );
    return 0;
  }
  if (args.action === 'replay') {
    const replayed = dlq
      .replay(args.selection, {
        dryRun: args.dryRun,
        onReplayed: (letter) => io.err.write(`replayed ${letter.messageId ?? '(no ID)'}\n`),
      })
      .catch((error: unknown) => {
        // What moved before the failure, then the error itself (exit 1 from main).
        const partial = replayReportOf(error);
        if (partial && args.json) io.out.write(`${JSON.stringify(partial, null, 2)}\n`);
        else if (partial) {
          const moved = partial.replayed.length + partial.alreadyProcessed.length + partial.withoutId;
          io.err.write(
            `replay stopped: ${moved} moved back, ${partial.failed.length} failed` +
              `${list(partial.failed.map((f) => `${f.messageId ?? '(no ID)'}: ${f.error}`))}, ` +
              `${partial.notAttempted} not attempted. What failed or was not attempted is in the DLQ (a failed one whose ` +
              `removal failed after its re-send is in the source too): a new replay sends it, the consumer's marker absorbs a second copy\n`,
          );
        }
        throw error;
      });
    const report = await printed(replayed, (report) => {
      if (args.json) return io.out.write(`${JSON.stringify(report, null, 2)}\n`);
      const verb = report.dryRun ? 'would replay' : 'replayed';
      io.out.write(
        `${verb} ${report.replayed.length} not yet processed${list(report.replayed)}\n` +
          `${verb} ${report.alreadyProcessed.length} already processed (the consumer acks them as duplicates)${list(report.alreadyProcessed)}\n` +
          (report.withoutId ? `${verb} ${report.withoutId} without a message ID\n` : ''),
      );
    });
    return notFound(report.notFound, io);
  }
  const by = io.env.ONCELY_OPERATOR || safeUser();
  const report = await printed(dlq.discard(args.selection, { by }), (report) => {
    if (args.json) return io.out.write(`${JSON.stringify(report, null, 2)}\n`);
    io.out.write(
      `discarded ${report.discarded.length} (recorded as by ${by})${list(report.discarded.map((d) => d.messageId ?? '(no ID)'))}\n`,
    );
  });
  return notFound(report.notFound, io);
}

/**
 * The pass's result, printed. A pass that completed but whose dead-letter session failed to
 * close (DeadLetterCloseError) had still moved its letters: its report is printed as after a
 * clean close, then the close's error is thrown on (main prints it, exit 1).
 */
async function printed<T>(pass: Promise<T>, print: (result: T) => void): Promise<T> {
  let result: T;
  try {
    result = await pass;
  } catch (error) {
    const completed = completedPassOf(error) as T | undefined;
    if (completed !== undefined) print(completed);
    throw error;
  }
  print(result);
  return result;
}

/** The consumer name the config file or `ONCELY_NAME` gives, if any (errors are left to the real load). */
function configuredName(io: CliIo, configFile: string | undefined): string | undefined {
  try {
    const name = loadConfig({ env: io.env, file: configFile }).name;
    return typeof name === 'string' && name !== '' ? name : undefined;
  } catch {
    return undefined;
  }
}

function listText({ letters, groups }: { letters: DeadLetterInfo[]; groups: FailureGroup[] }): string {
  const rows = groups.map((g) => [
    g.id,
    String(g.count),
    g.lastFailedAt ? g.lastFailedAt.toISOString() : '',
    g.error.replace(/\s+/g, ' ').slice(0, 80),
  ]);
  let text = table(['group', 'count', 'last failure', 'error'], rows);
  text += `\n${table(
    ['message id', 'group', 'attempts', 'last failure'],
    letters.map((l) => [
      l.messageId ?? '(no ID)',
      l.group,
      l.attempts === undefined ? '' : String(l.attempts),
      l.lastFailedAt ? l.lastFailedAt.toISOString() : '',
    ]),
  )}`;
  return text;
}

function list(ids: string[]): string {
  if (ids.length === 0) return '';
  return `: ${ids.slice(0, 20).join(', ')}${ids.length > 20 ? `, ... (${ids.length - 20} more)` : ''}`;
}

function notFound(ids: string[], io: CliIo): number {
  if (ids.length === 0) return 0;
  io.err.write(`not in the dead-letter queue: ${ids.join(', ')}\n`);
  return 1;
}

function safeUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'unknown';
  }
}

function table(headers: string[], rows: string[][]): string {
  const cells = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join('\n')}\n${rows.length ? '' : '(no dead letters)\n'}`;
}
