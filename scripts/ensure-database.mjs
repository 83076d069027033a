// Creates the PostgreSQL database a connection URL names, unless it exists (connecting
// to the server's `postgres` database to do it). The test command gives its Node 22 run a
// database of its own this way.
//
//   node scripts/ensure-database.mjs postgres://postgres@127.0.0.1:5432/oncely_node22
import pg from 'pg';

const url = new URL(process.argv[2] ?? '');
const database = decodeURIComponent(url.pathname.slice(1));
if (!/^\w+$/.test(database)) {
  console.error(
    `ensure-database: expected a URL naming a database of word characters, got ${process.argv[2]}`,
  );
  process.exit(2);
}
url.pathname = '/postgres';
const client = new pg.Client({ connectionString: url.href });
await client.connect();
try {
  const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
  if (rowCount === 0) {
    // Two runs creating it at once: the loser's duplicate_database (42P04) means it exists.
    await client.query(`CREATE DATABASE "${database}"`).catch((error) => {
      if (error.code !== '42P04') throw error;
    });
    console.log(`ensure-database: created ${database}`);
  }
} finally {
  await client.end();
}
