// Child process of deadLetterCrash.test.ts: replays every dead letter of the consumer in
// $DLQ_CHILD (JSON: connectionString, schema, config) and prints one line per letter back
// in the source, so the parent can SIGKILL it half-way. Plain JavaScript on bare Node.
import { DeadLetters } from '@oncely/core';
import * as kafka from '@oncely/kafka';
import { PostgresStore } from '@oncely/postgres';

const { connectionString, schema, config } = JSON.parse(process.env.DLQ_CHILD ?? '{}');
// A long lock timeout: the parent holds the ledger's table lock to stop a pass between its
// send and the record of it, then kills it there.
const store = new PostgresStore({ connectionString, schema, poolMax: 2, lockTimeoutMs: 60_000 });
const dlq = await DeadLetters.open({ ...config, store, handler: async () => {} }, kafka);
const report = await dlq.replay(
  {},
  { onReplayed: (letter) => process.stdout.write(`replayed ${letter.messageId}\n`) },
);
process.stdout.write(`done ${report.replayed.length + report.alreadyProcessed.length}\n`);
await store.close();
