/**
 * Renders one `$n`-parameterized statement of the store as plain SQL with its parameters
 * written as literals, so that it can travel in the same simple-protocol message as the
 * transaction's BEGIN (one round trip instead of two). Only strings and arrays of strings
 * are inlined; anything else returns `undefined` and the statement is sent parameterized.
 *
 * Literals use PostgreSQL's escape-string syntax when they hold a backslash (`E'a\\b'`),
 * which reads the same whatever `standard_conforming_strings` says, and double every
 * quote; a NUL (which no text value can hold) is refused so the server reports it on the
 * parameterized path as usual.
 *
 * @example
 * ```ts
 * inlineLiterals('SELECT $1, $2', ["o'k", ['a', 'b']]);
 * // "SELECT 'o''k', (ARRAY['a', 'b']::text[])"
 * ```
 */
export function inlineLiterals(text: string, params: readonly unknown[]): string | undefined {
  const literals: string[] = [];
  for (const param of params) {
    const literal = toLiteral(param);
    if (literal === undefined) return undefined;
    literals.push(literal);
  }
  // The statement's own text, split once at its placeholders: a literal that contains
  // "$2" is never re-read.
  const { pieces, slots } = template(text);
  let sql = pieces[0]!;
  for (let i = 0; i < slots.length; i++) {
    const literal = literals[slots[i]!];
    if (literal === undefined) return undefined;
    sql += literal + pieces[i + 1]!;
  }
  return sql;
}

/** A statement split at its `$n` placeholders: `pieces[i]`, parameter `slots[i]`, `pieces[i + 1]`… */
interface Template {
  readonly pieces: readonly string[];
  readonly slots: readonly number[];
}

/** The store's statements are few and fixed: each is split once. */
const templates = new Map<string, Template>();
const TEMPLATE_CACHE_LIMIT = 64;

function template(text: string): Template {
  let cached = templates.get(text);
  if (cached === undefined) {
    const parts = text.split(/\$(\d+)/);
    const pieces: string[] = [];
    const slots: number[] = [];
    for (let i = 0; i < parts.length; i++) {
      if (i % 2 === 0) pieces.push(parts[i]!);
      else slots.push(Number(parts[i]) - 1);
    }
    cached = { pieces, slots };
    if (templates.size < TEMPLATE_CACHE_LIMIT) templates.set(text, cached);
  }
  return cached;
}

function toLiteral(value: unknown): string | undefined {
  if (typeof value === 'string') return escapeLiteral(value);
  if (Array.isArray(value)) {
    const items: string[] = [];
    for (const item of value) {
      if (typeof item !== 'string') return undefined;
      const literal = escapeLiteral(item);
      if (literal === undefined) return undefined;
      items.push(literal);
    }
    return `(ARRAY[${items.join(', ')}]::text[])`;
  }
  return undefined;
}

/** `'…'` with quotes doubled, or `E'…'` with backslashes doubled too; undefined for a NUL. */
export function escapeLiteral(value: string): string | undefined {
  if (value.includes('\0')) return undefined;
  const quoted = value.replaceAll("'", "''");
  return value.includes('\\') ? `E'${quoted.replaceAll('\\', '\\\\')}'` : `'${quoted}'`;
}
