import { ConfigError } from '@oncely/core';

/**
 * Plain SQL identifiers only. Names are always quoted as well, but refusing anything
 * unusual keeps user input from ever shaping SQL beyond a well-formed name.
 */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** MySQL and MariaDB refuse identifiers longer than 64 characters. */
const MAX_IDENTIFIER_LENGTH = 64;

/**
 * Validates `name` as a plain identifier (letters, digits, `_`; not starting with a
 * digit; at most 64 characters) and returns it backtick-quoted for MySQL.
 *
 * @param field the option it came from, for the error message
 * @throws ConfigError when `name` is not a plain identifier
 *
 * @example
 * ```ts
 * quoteMySqlIdentifier('oncely', 'schema'); // '`oncely`'
 * quoteMySqlIdentifier('a`b', 'schema');    // throws ConfigError
 * ```
 */
export function quoteMySqlIdentifier(name: unknown, field: string): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name) || name.length > MAX_IDENTIFIER_LENGTH) {
    throw new ConfigError(
      field,
      `must be a plain SQL identifier (letters, digits and _, not starting with a digit, at most ${MAX_IDENTIFIER_LENGTH} characters); got ${JSON.stringify(name)}`,
    );
  }
  return `\`${name}\``;
}

/**
 * Validates a table name, optionally database-qualified (`orders` or `shop.orders`), and
 * returns it quoted (`` `shop`.`orders` ``).
 *
 * @example
 * ```ts
 * quoteMySqlQualifiedName('shop.orders', 'table'); // '`shop`.`orders`'
 * ```
 */
export function quoteMySqlQualifiedName(name: unknown, field: string): string {
  if (typeof name !== 'string') return quoteMySqlIdentifier(name, field);
  const parts = name.split('.');
  if (parts.length > 2)
    throw new ConfigError(field, `must be "table" or "database.table"; got ${JSON.stringify(name)}`);
  return parts.map((part) => quoteMySqlIdentifier(part, field)).join('.');
}

/** The databases MySQL and MariaDB keep for themselves: never the store's. */
const SYSTEM_DATABASES = new Set(['mysql', 'information_schema', 'performance_schema', 'sys']);

/** Validates the store's database name: a plain identifier that is not a system database. */
export function quoteSchemaName(schema: unknown, field = 'schema'): string {
  const quoted = quoteMySqlIdentifier(schema, field);
  if (SYSTEM_DATABASES.has((schema as string).toLowerCase())) {
    throw new ConfigError(field, `must not be a system database; got "${schema}"`);
  }
  return quoted;
}
