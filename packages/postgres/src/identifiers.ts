import { ConfigError } from '@oncely/core';

/**
 * Plain SQL identifiers only. Names are always quoted as well, but refusing anything
 * unusual keeps user input from ever shaping SQL beyond a well-formed name.
 */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** PostgreSQL truncates identifiers longer than NAMEDATALEN - 1 bytes. */
const MAX_IDENTIFIER_LENGTH = 63;

/**
 * Validates `name` as a plain identifier (letters, digits, `_`; not starting with a
 * digit; at most 63 characters) and returns it double-quoted for SQL.
 *
 * @param field the option it came from, for the error message
 * @throws ConfigError when `name` is not a plain identifier
 *
 * @example
 * ```ts
 * quoteIdentifier('oncely', 'schema'); // '"oncely"'
 * quoteIdentifier('a"b', 'schema');    // throws ConfigError
 * ```
 */
export function quoteIdentifier(name: unknown, field: string): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name) || name.length > MAX_IDENTIFIER_LENGTH) {
    throw new ConfigError(
      field,
      `must be a plain SQL identifier (letters, digits and _, not starting with a digit, at most ${MAX_IDENTIFIER_LENGTH} characters); got ${JSON.stringify(name)}`,
    );
  }
  return `"${name}"`;
}

/**
 * Validates a table name, optionally schema-qualified (`orders` or `shop.orders`), and
 * returns it quoted (`"shop"."orders"`).
 *
 * @example
 * ```ts
 * quoteQualifiedName('shop.orders', 'table'); // '"shop"."orders"'
 * ```
 */
export function quoteQualifiedName(name: unknown, field: string): string {
  if (typeof name !== 'string') return quoteIdentifier(name, field);
  const parts = name.split('.');
  if (parts.length > 2)
    throw new ConfigError(field, `must be "table" or "schema.table"; got ${JSON.stringify(name)}`);
  return parts.map((part) => quoteIdentifier(part, field)).join('.');
}

/**
 * Validates the store's schema name: a plain identifier that PostgreSQL lets us create
 * (names starting with `pg_` are reserved for system schemas).
 */
export function quoteSchemaName(schema: unknown, field = 'schema'): string {
  const quoted = quoteIdentifier(schema, field);
  if ((schema as string).toLowerCase().startsWith('pg_')) {
    throw new ConfigError(field, `must not start with "pg_" (reserved by PostgreSQL); got "${schema}"`);
  }
  return quoted;
}
