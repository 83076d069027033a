// Child process of deadLetterCrash.test.ts: replays every dead letter of the consumer in
// $DLQ_CHILD (JSON: connectionString, schema, config) and prints one line per letter back
// in the source, so the parent can SIGKILL it half-way. Plain JavaScript on bare Node.
//
// $DLQ_PAUSE (`intent:N` or `sent:N`) stops the pass for good at a point the parent then
// kills it at, and prints `paused <phase>`: `intent:N` once the N-th batch's intents are
// committed (nothing sent), `sent:N` once the N-th batch was sent and acknowledged, as it
// is about to record that (the copies are in the source, the ledger says `replaying`).
// Only the store's ledger writes are watched; the pass itself is the product's.
import { DeadLetters } from '@oncely/core';
import * as kafka from '@oncely/kafka';
import { PostgresStore } from '@oncely/postgres';

const { connectionString, schema, config } = JSON.parse(process.env.DLQ_CHILD ?? '{}');
const store = new PostgresStore({ connectionString, schema, poolMax: 2 });
const [phase, nth] = (process.env.DLQ_PAUSE ?? '').split(':');
if (phase) {
  const ledger = store.deadLetterLog.ledger;
  const put = ledger.put.bind(ledger);
  let intents = 0;
  const pause = () => {
    process.stdout.write(`paused ${phase}\n`);
    return new Promise(() => setInterval(() => {}, 1 << 30));
  };
  ledger.put = async (entries) => {
    const state = entries[0]?.state;
    if (state === 'replaying') {
      intents += 1;
      if (phase === 'intent' && intents === Number(nth)) {
        await put(entries);
        return pause();
      }
    }
    if (state === 'replayed' && phase === 'sent' && intents === Number(nth)) return pause();
    return put(entries);
  };
}
const dlq = await DeadLetters.open({ ...config, store, handler: async () => {} }, kafka);
const report = await dlq.replay(
  {},
  { onReplayed: (letter) => process.stdout.write(`replayed ${letter.messageId}\n`) },
);
process.stdout.write(`done ${report.replayed.length + report.alreadyProcessed.length}\n`);
await store.close();
