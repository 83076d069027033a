import { DLQ_USAGE } from './dlq.js';
import { OUTBOX_USAGE } from './outbox.js';

/**
 * The usage text, one section per command, so `oncely <command> --help` can print only its
 * own (and `oncely --help` all of them, in this order).
 */
export const COMMAND_USAGE: Record<string, string> = {
  migrate: `  migrate                         apply pending schema migrations
`,
  prune: `  prune --older-than 14d          delete completed markers older than that (in batches;
        [--batch-size 1000]       the age needs a unit: d, h, m, s or ms)
        [--consumer NAME]
        [--dry-run]               print how many markers would go, delete nothing
        [--force]                 allow an age under $ONCELY_PRUNE_MIN_AGE (default 1h)
`,
  stats: `  stats [--consumer NAME]         markers per consumer and status, attempt counters
`,
  inspect: `  inspect CONSUMER MESSAGE_ID     one message's marker and attempt counter, and what they
        [--config FILE]           mean (processed, in progress, retried, dead-lettered);
                                  with a broker config, what its DLQ holds (Service Bus)
`,
  doctor: `  doctor [--config FILE]          check the store, the broker (the adapter's diagnose()),
        [--retention 14d]         handlerTimeoutMs against the broker's lease limit, and
                                  the prune age against the broker's redelivery horizon
`,
  outbox: OUTBOX_USAGE,
  dlq: DLQ_USAGE,
};

const COMMON_OPTIONS = `common options:
  --database-url URL              default: $DATABASE_URL, else $ONCELY_STORE_URL;
                                  postgres://... (@oncely/postgres) or mysql://...
                                  (@oncely/mysql, MySQL 8.0+ / MariaDB 10.6+)
  --schema NAME                   default: $ONCELY_SCHEMA or 'oncely' (MySQL: the database)
`;

/** `oncely --help`: every command. */
export const USAGE = `usage: oncely <command> [options]

commands:
${Object.values(COMMAND_USAGE).join('')}
${COMMON_OPTIONS}`;

/** `oncely <command> --help`: that command and the options every command takes. */
export function commandUsage(command: string): string {
  return `usage: oncely ${command} [options]\n\n${COMMAND_USAGE[command]}\n${COMMON_OPTIONS}`;
}

/** Whether the arguments ask for help (`-h`/`--help` anywhere before a `--`). */
export function asksForHelp(args: string[]): boolean {
  for (const arg of args) {
    if (arg === '--') return false;
    if (arg === '--help' || arg === '-h') return true;
  }
  return false;
}
