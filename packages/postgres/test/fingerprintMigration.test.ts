import { PGlite } from '@electric-sql/pglite';
import { payloadFingerprint, processOnce } from '@oncely/core';
import { afterAll, describe, expect, it } from 'vitest';
import { LATEST_VERSION, PostgresStore, SchemaVersionError } from '../src/index.js';
import { connectionString, dropSchema, hasPostgres, uniqueSchema } from './serverEnv.js';

// Migration 0002_payload_fingerprint on a schema a version-1 package left behind: the
// store refuses it until migrated, migrate() applies 0002 alone, and the markers written
// before it keep working (a NULL fingerprint never mismatches).

const pglite = await PGlite.create();
const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
  await pglite.close();
});

const backends = [
  { name: 'PGlite', available: true, open: (schema: string) => new PostgresStore({ pglite, schema }) },
  {
    name: 'PostgreSQL',
    available: hasPostgres,
    open: (schema: string) => {
      schemas.push(schema);
      return new PostgresStore({ connectionString, schema, poolMax: 2 });
    },
  },
];

for (const backend of backends) {
  describe.skipIf(!backend.available)(`migration 0002_payload_fingerprint (${backend.name})`, () => {
    it('upgrades a version-1 schema forward, keeping its markers', async () => {
      const schema = uniqueSchema('oncely_fp_mig');
      const setup = backend.open(schema);
      await setup.migrate();
      // What a version-1 package left: no fingerprint column, migration 1 only, one marker.
      await setup.transaction(async (tx) => {
        await tx.query(`ALTER TABLE "${schema}".processed_messages DROP COLUMN fingerprint`);
        await tx.query(`DELETE FROM "${schema}".migrations WHERE version = 2`);
        await tx.query(
          `INSERT INTO "${schema}".processed_messages (consumer, message_id) VALUES ('c', 'before')`,
        );
      });
      await setup.close();

      const store = backend.open(schema);
      try {
        const refused = await store.ping().catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(SchemaVersionError);
        expect(refused).toMatchObject({ found: 1, expected: LATEST_VERSION });
        const migrated = await store.migrate();
        expect(migrated.applied).toContain('0002_payload_fingerprint');
        expect(migrated.applied).not.toContain('0001_init');

        const fingerprint = payloadFingerprint({ body: 'x' });
        // The old marker has no fingerprint: a duplicate, never a mismatch.
        expect(
          await processOnce(store, { consumer: 'c', messageId: 'before' }, async () => 1, { fingerprint }),
        ).toEqual({ status: 'duplicate' });
        expect(
          await processOnce(store, { consumer: 'c', messageId: 'after' }, async () => 2, { fingerprint }),
        ).toEqual({ status: 'processed', result: 2 });
        const other = payloadFingerprint({ body: 'y' });
        expect(
          await processOnce(store, { consumer: 'c', messageId: 'after' }, async () => 3, {
            fingerprint: other,
          }),
        ).toEqual({
          status: 'duplicate',
          payloadMismatch: { storedFingerprint: fingerprint, fingerprint: other },
        });
      } finally {
        await store.close();
      }
    });
  });
}
