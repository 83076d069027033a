import { requireService } from '@oncely/testkit';
import pg from 'pg';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** True when PostgreSQL answers; with CI=true a missing server throws (the suite fails). */
export async function postgresAvailable(): Promise<boolean> {
  return requireService('PostgreSQL', async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    await client.end();
  });
}
