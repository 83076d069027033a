import { ConfigError } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { PostgresStore, quoteIdentifier } from '../src/index.js';

describe('identifiers', () => {
  it('quotes plain identifiers', () => {
    expect(quoteIdentifier('oncely', 'schema')).toBe('"oncely"');
    expect(quoteIdentifier('Mixed_Case_1', 'schema')).toBe('"Mixed_Case_1"');
  });

  it.each(['', '1abc', 'a"b', 'a b', 'a;drop table x', 'a.b', 'x'.repeat(64), 'é'])('refuses %j', (name) => {
    expect(() => quoteIdentifier(name, 'schema')).toThrow(ConfigError);
  });

  it('validates the schema option before any SQL is built', () => {
    expect(
      () => new PostgresStore({ connectionString: 'postgres://x', schema: 'x"; DROP SCHEMA public; --' }),
    ).toThrow(ConfigError);
    expect(() => new PostgresStore({ connectionString: 'postgres://x', schema: 'pg_catalog' })).toThrow(
      ConfigError,
    );
    expect(() => new PostgresStore({ connectionString: 'postgres://x', lockTimeoutMs: 1.5 })).toThrow(
      ConfigError,
    );
  });

  it('needs exactly one way to reach the database', () => {
    expect(() => new PostgresStore({} as never)).toThrow(/exactly one of/);
    expect(() => new PostgresStore({ connectionString: 'postgres://x', embedded: {} } as never)).toThrow(
      /connectionString, embedded/,
    );
  });
});
