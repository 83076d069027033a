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
  let unknownParameter = false;
  // One pass over the statement's own text: a literal that contains "$2" is never re-read.
  const sql = text.replace(/\$(\d+)/g, (_match, digits: string) => {
    const literal = literals[Number(digits) - 1];
    if (literal === undefined) unknownParameter = true;
    return literal ?? '';
  });
  return unknownParameter ? undefined : sql;
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
