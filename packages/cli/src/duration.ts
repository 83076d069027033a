const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses `30d`, `12h`, `90m`, `45s`, `500ms` or a bare number of milliseconds.
 *
 * @example
 * ```ts
 * parseDuration('14d'); // 1209600000
 * ```
 */
export function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match) throw new Error(`'${text}' is not a duration (use e.g. 14d, 12h, 90m, 45s or milliseconds)`);
  return Math.round(Number(match[1]) * UNITS[match[2] ?? 'ms']!);
}
