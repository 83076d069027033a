import { durationOption, parseDuration, UsageError } from './duration.js';
import type { CliIo } from './main.js';
import type { CliStore } from './stores.js';

/** Youngest age `prune` accepts without `--force`, unless `ONCELY_PRUNE_MIN_AGE` says otherwise. */
export const DEFAULT_PRUNE_MIN_AGE = '1h';

/** The options `oncely prune` reads. */
export interface PruneArgs {
  'older-than'?: string;
  'batch-size'?: string;
  consumer?: string;
  'dry-run'?: boolean;
  force?: boolean;
}

/**
 * `oncely prune --older-than 14d [--batch-size 1000] [--consumer NAME] [--dry-run] [--force]`:
 * deletes completed markers older than the age, in batches, with progress on stderr.
 * Refuses an age without a unit, and an age under the minimum (`ONCELY_PRUNE_MIN_AGE`,
 * 1 h by default) unless `--force`: a marker pruned while its message can still be
 * redelivered lets that message run again.
 */
export async function prune(
  store: CliStore,
  { text, olderThan, batchSize }: PruneOptions,
  args: PruneArgs,
  io: CliIo,
): Promise<number> {
  const scope = { olderThan, consumer: args.consumer };
  const total = await store.prune({ ...scope, dryRun: true });
  if (args['dry-run']) {
    io.out.write(`would delete ${total} markers processed more than ${text} ago (dry run)\n`);
    return 0;
  }
  const progress = progressReporter(io, total);
  const deleted = await store.prune({ ...scope, batchSize, onProgress: progress.update });
  progress.done();
  io.out.write(`deleted ${deleted} markers processed more than ${text} ago\n`);
  return 0;
}

/**
 * Checks `oncely prune`'s options (also before any store is opened): the age, with a unit
 * and over the minimum unless `--force`, and the batch size.
 */
/** `oncely prune`'s options as checked by readPruneArgs. */
export interface PruneOptions {
  /** The age as written, for the messages. */
  text: string;
  olderThan: number;
  batchSize: number | undefined;
}

export function readPruneArgs(args: PruneArgs, env: CliIo['env']): PruneOptions {
  const text = args['older-than'];
  if (!text) throw new UsageError('--older-than is required (e.g. --older-than 14d)');
  const olderThan = durationOption('--older-than', text);
  const minText = env.ONCELY_PRUNE_MIN_AGE || DEFAULT_PRUNE_MIN_AGE;
  let minimum: number;
  try {
    minimum = parseDuration(minText);
  } catch (error) {
    throw new UsageError(`ONCELY_PRUNE_MIN_AGE: ${(error as Error).message}`);
  }
  if (olderThan < minimum && !args.force) {
    throw new UsageError(
      `--older-than ${text} is under the minimum of ${minText} (ONCELY_PRUNE_MIN_AGE): a message redelivered after its marker is pruned runs again. Pass --force if you mean it`,
    );
  }
  let batchSize: number | undefined;
  if (args['batch-size'] !== undefined) {
    batchSize = Number(args['batch-size']);
    if (!Number.isInteger(batchSize) || batchSize < 1)
      throw new UsageError(`--batch-size must be a positive integer, got '${args['batch-size']}'`);
  }
  return { text, olderThan, batchSize };
}

/**
 * Progress on stderr: a bar redrawn in place on a terminal, one line per batch otherwise
 * (logs, pipes). The total is counted before the first batch; markers that age past the
 * cutoff meanwhile can take the count a little over it.
 */
function progressReporter(io: CliIo, total: number): { update(deleted: number): void; done(): void } {
  const tty = (io.err as { isTTY?: boolean }).isTTY === true;
  let drawn = false;
  return {
    update(deleted) {
      const share = total === 0 ? 1 : Math.min(1, deleted / total);
      if (tty) {
        const width = 30;
        const filled = Math.round(share * width);
        io.err.write(
          `\r[${'#'.repeat(filled)}${' '.repeat(width - filled)}] ${deleted}/${total} markers (${Math.round(share * 100)}%)`,
        );
        drawn = true;
      } else if (deleted > 0) {
        io.err.write(`pruned ${deleted} of ${total} markers (${Math.round(share * 100)}%)\n`);
      }
    },
    done() {
      if (drawn) io.err.write('\n');
    },
  };
}
