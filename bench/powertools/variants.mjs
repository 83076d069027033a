// The three ways scenario 4 applies one payment, built on demand: libraries are imported
// inside each factory (not at the top), so a footprint child process that builds one
// variant loads only that variant's code and its memory delta is that variant's own.
//
//   bare        BEGIN; INSERT; COMMIT on a pg.Pool — no duplicate protection
//   oncely      processOnce(PostgresStore): the processed marker and the INSERT in one transaction
//   powertools  makeIdempotent (@aws-lambda-powertools/idempotency) with its Redis-compatible
//               CachePersistenceLayer on @redis/client, wrapping the bare transaction:
//               SET NX of an INPROGRESS record, the transaction, SET of the COMPLETED record
import { DATABASE_URL, REDIS_URL } from '../lib/common.mjs';
import { bareTransaction, benchPool, businessInsert, fillPool } from '../lib/pg.mjs';

export const VARIANTS = ['bare', 'oncely', 'powertools'];

/**
 * Builds one variant. `op(seq)` applies payment `seq` once and checks it was applied (not
 * taken for a duplicate); `close()` releases connections (and the run's Redis keys).
 */
export async function createVariant(name, { schema, concurrency, tag }) {
  if (name === 'bare') {
    const pool = benchPool(concurrency);
    await fillPool(pool, concurrency);
    const bare = bareTransaction(pool, schema);
    return { op: (seq) => bare(`order-${seq}`), close: () => pool.end() };
  }

  if (name === 'oncely') {
    const [{ processOnce }, { PostgresStore }] = await Promise.all([
      import('@oncely/core'),
      import('@oncely/postgres'),
    ]);
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: concurrency });
    await store.ping();
    await Promise.all(Array.from({ length: concurrency }, () => store.ping()));
    const insert = businessInsert(schema);
    return {
      op: async (seq) => {
        const outcome = await processOnce(store, { consumer: 'bench', messageId: `m-${seq}` }, (tx) =>
          tx.query(insert, [`order-${seq}`, 40]),
        );
        if (outcome.status !== 'processed') throw new Error(`m-${seq}: ${outcome.status}`);
      },
      close: () => store.close(),
    };
  }

  if (name === 'powertools') {
    const [{ makeIdempotent, IdempotencyConfig }, { CachePersistenceLayer }, { createClient }] =
      await Promise.all([
        import('@aws-lambda-powertools/idempotency'),
        import('@aws-lambda-powertools/idempotency/cache'),
        import('@redis/client'),
      ]);
    const redis = createClient({ url: REDIS_URL });
    redis.on('error', () => {});
    await redis.connect();
    const pool = benchPool(concurrency);
    await fillPool(pool, concurrency);
    const bare = bareTransaction(pool, schema);
    const keyPrefix = `oncely-bench-${tag}`;
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'id', expiresAfterSeconds: 3600 });
    // Outside Lambda there is no invocation deadline: without one Powertools writes
    // INPROGRESS records with no in-progress expiry (a crash would block the key for
    // expiresAfterSeconds) and logs a warning on every call. A context reporting 30 s left
    // (Oncely's default handlerTimeoutMs) gives it the in-progress expiry it has in Lambda.
    config.registerLambdaContext({ getRemainingTimeInMillis: () => 30_000 });
    const applyPayment = makeIdempotent(
      async (event) => {
        await bare(event.orderId);
        return { applied: true };
      },
      {
        persistenceStore: new CachePersistenceLayer({ client: redis }),
        // The key is the message ID, as for Oncely (not a hash of the whole payload).
        config,
        keyPrefix,
      },
    );
    return {
      op: async (seq) => {
        const result = await applyPayment({ id: `m-${seq}`, orderId: `order-${seq}`, amount: 40 });
        if (result?.applied !== true) throw new Error(`m-${seq}: not applied`);
      },
      close: async () => {
        await deleteKeys(redis, `${keyPrefix}#*`);
        await redis.quit();
        await pool.end();
      },
    };
  }

  throw new Error(`unknown variant '${name}' (known: ${VARIANTS.join(', ')})`);
}

/** Removes the run's idempotency records (SCAN, never KEYS: Redis is shared). */
async function deleteKeys(redis, pattern) {
  let cursor = '0';
  do {
    const reply = await redis.scan(cursor, { MATCH: pattern, COUNT: 1000 });
    cursor = String(reply.cursor);
    if (reply.keys.length > 0) await redis.del(reply.keys);
  } while (cursor !== '0');
}
