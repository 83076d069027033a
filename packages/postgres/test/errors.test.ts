import { isOncelyError } from '@oncely/core';
import { afterAll, describe, expect, it } from 'vitest';
import { isSchemaVersionError, PostgresStore } from '../src/index.js';
import { connectionString, dropSchema, hasPostgres, uniqueSchema } from './serverEnv.js';

describe('store error messages', () => {
  it('names the database it cannot reach, without the password', async () => {
    // A host name that cannot resolve (.invalid is reserved for that, RFC 2606).
    const url = 'postgres://app:s3cret@no-such-host.invalid:5432/orders';
    const store = new PostgresStore({ connectionString: url, connectTimeoutMs: 5000 });
    try {
      const error = await store.ping().catch((e: unknown) => e);
      expect(isOncelyError(error, 'STORE_UNAVAILABLE')).toBe(true);
      expect((error as Error).message).toMatch(
        /^cannot connect to PostgreSQL at postgres:\/\/app:\*\*\*@no-such-host\.invalid:5432\/orders: getaddrinfo ENOTFOUND no-such-host\.invalid/,
      );
      expect((error as Error).message).not.toContain('s3cret');
    } finally {
      await store.close();
    }
  });

  it('redacts a password given as a keyword too', async () => {
    const store = new PostgresStore({
      connectionString: 'host=no-such-host.invalid port=5432 password=s3cret dbname=orders',
      connectTimeoutMs: 5000,
    });
    try {
      const error = (await store.ping().catch((e: unknown) => e)) as Error;
      expect(error.message).toContain(
        'cannot connect to PostgreSQL at host=no-such-host.invalid port=5432 password=*** dbname=orders',
      );
      expect(error.message).not.toContain('s3cret');
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(!hasPostgres)('the schema: not migrated, and ONCELY_SCHEMA', () => {
  const schemas: string[] = [];
  afterAll(async () => {
    for (const schema of schemas) await dropSchema(schema);
  });

  it('reports a schema that was never migrated with its own code and one hint', async () => {
    const schema = uniqueSchema('errors');
    const store = new PostgresStore({ connectionString, schema });
    try {
      const error = await store.ping().catch((e: unknown) => e);
      expect(isSchemaVersionError(error)).toBe(true);
      expect(isOncelyError(error, 'SCHEMA_NOT_MIGRATED')).toBe(true);
      expect((error as Error).message).toBe(
        `schema "${schema}" is not migrated: call store.migrate() (or run \`oncely migrate\`) first`,
      );
    } finally {
      await store.close();
    }
  });

  it('takes the schema from ONCELY_SCHEMA when none is given, as the CLI does', async () => {
    const schema = uniqueSchema('envschema');
    schemas.push(schema);
    const before = process.env.ONCELY_SCHEMA;
    process.env.ONCELY_SCHEMA = schema;
    try {
      const store = new PostgresStore({ connectionString });
      expect(store.schema).toBe(schema);
      await store.migrate();
      await store.close();
      const explicit = new PostgresStore({ connectionString, schema: 'oncely_explicit' });
      expect(explicit.schema).toBe('oncely_explicit');
      await explicit.close();
      process.env.ONCELY_SCHEMA = 'bad-name';
      expect(() => new PostgresStore({ connectionString })).toThrow(
        /^Invalid Oncely config: schema \(from ONCELY_SCHEMA\) must be a plain SQL identifier/,
      );
    } finally {
      if (before === undefined) delete process.env.ONCELY_SCHEMA;
      else process.env.ONCELY_SCHEMA = before;
    }
    const { admin } = await import('./serverEnv.js');
    const { rows } = await admin.query('SELECT 1 FROM information_schema.tables WHERE table_schema = $1', [
      schema,
    ]);
    expect(rows.length).toBeGreaterThan(0);
  });
});
