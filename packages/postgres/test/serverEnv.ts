import { randomUUID } from 'node:crypto';
import { requireService } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeEach } from 'vitest';
import type { PostgresStore } from '../src/index.js';

/** The real server the tests use (trust auth on 127.0.0.1 in CI and the dev container). */
export const connectionString = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A small pool for test-side SQL (creating, counting, terminating backends). */
export const admin = new pg.Pool({ connectionString, max: 3 });
admin.on('error', () => {
  // Tests terminate backends on purpose; an idle admin client may be among them.
});

/**
 * True when PostgreSQL answers. With CI=true a missing server fails the run (requireService
 * throws); elsewhere the real-server tests are skipped with a warning.
 */
export const hasPostgres = await requireService('PostgreSQL', () => admin.query('SELECT 1'));

/** A schema name no other run or test uses. */
export function uniqueSchema(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
}

export async function dropSchema(schema: string): Promise<void> {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

/**
 * What a test file opens on the server: push each schema, store and pool here. After the
 * file the stores are closed, the pools ended, the schemas dropped (kept, to look at, when
 * a test failed) and the admin pool ended. Registers its own hooks, so call it once at the
 * file's top level.
 */
export function cleanupAfterFile(): { schemas: string[]; stores: PostgresStore[]; pools: pg.Pool[] } {
  let failed = false;
  const schemas: string[] = [];
  const stores: PostgresStore[] = [];
  const pools: pg.Pool[] = [];
  beforeEach(({ onTestFailed }) => {
    onTestFailed(() => {
      failed = true;
    });
  });
  afterAll(async () => {
    for (const store of stores) await store.close().catch(() => {});
    for (const pool of pools) await pool.end().catch(() => {});
    if (!failed) for (const schema of schemas) await dropSchema(schema);
    await admin.end();
  });
  return { schemas, stores, pools };
}
