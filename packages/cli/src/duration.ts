const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses a duration with its unit: `30d`, `12h`, `90m`, `45s`, `500ms`. A bare number is
 * refused: `--older-than 14` (days? hours? ms?) is too easy to get wrong when the
 * command deletes data.
 *
 * @example
 * ```ts
 * parseDuration('14d'); // 1209600000
 * parseDuration('14');  // throws: needs a unit
 * ```
 */
export function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match) throw new UsageError(`'${text}' is not a duration (use e.g. 14d, 12h, 90m, 45s or 500ms)`);
  if (match[2] === undefined)
    throw new UsageError(`'${text}' needs a unit: ${text}d, ${text}h, ${text}m, ${text}s or ${text}ms`);
  return Math.round(Number(match[1]) * UNITS[match[2]]!);
}

/** Bad command-line usage: the CLI prints it with the usage and exits with code 2. */
/** A duration given as an option's value; an error names the option. */
export function durationOption(option: string, text: string): number {
  try {
    return parseDuration(text);
  } catch (error) {
    throw new UsageError(`${option}: ${(error as Error).message}`);
  }
}

export class UsageError extends Error {
  override name = 'UsageError';
}
