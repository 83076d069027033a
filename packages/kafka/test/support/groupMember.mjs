// A consumer-group member in a child process (rebalance.test.ts): consumes a topic with
// @oncely/kafka into the PostgreSQL store, writes one effect row per applied record,
// reports its events to the parent over IPC, and stops gracefully on 'stop'. The
// parent SIGKILLs it to simulate a crash. Plain JavaScript: the child runs on bare Node.
import { silentLogger } from '@oncely/core';
import { createKafkaConsumer } from '@oncely/kafka';
import { PostgresStore } from '@oncely/postgres';

const plan = JSON.parse(process.env.ONCELY_KAFKA_MEMBER ?? '{}');
const send = (message) => process.send?.(message);
process.on('disconnect', () => process.exit(2));
// Never outlive the test.
setTimeout(() => process.exit(3), plan.maxLifetimeMs ?? 120_000);

let processed = 0;
const store = new PostgresStore({ connectionString: plan.databaseUrl, schema: plan.schema });
const consumer = createKafkaConsumer({
  name: plan.name,
  broker: {
    brokers: plan.brokers,
    topic: plan.topic,
    groupId: plan.groupId,
    sessionTimeout: plan.sessionTimeout,
    fromBeginning: true,
    maxWaitTimeInMs: 200,
    rebalanceTimeout: 20_000,
    commitIntervalMs: plan.commitIntervalMs,
    // The client library under test (ONCELY_KAFKA_CLIENT, as in support/harness.ts).
    ...(process.env.ONCELY_KAFKA_CLIENT ? { client: process.env.ONCELY_KAFKA_CLIENT } : {}),
  },
  store,
  mode: plan.mode,
  concurrency: plan.concurrency,
  ...(plan.batch ? { batch: { size: plan.batch } } : {}),
  logger: silentLogger,
  handler: async (message, ctx) => {
    // holdAfter: once that many records are processed (committed), every later handler waits
    // for ever, so the member dies (SIGKILL) holding applied records whose offsets it has not
    // committed, however late the kill comes. Counted from commits, not handler calls: with
    // `batch`, a batch holding its 21st call would keep earlier records of it uncommitted.
    if (plan.holdAfter !== undefined && processed >= plan.holdAfter) await new Promise(() => {});
    await ctx.tx.query(
      `INSERT INTO ${plan.table} (message_id, consumer, partition, record_offset) VALUES ($1, $2, $3, $4)`,
      [message.id, plan.label, message.raw.partition, message.raw.message.offset],
    );
    await new Promise((resolve) => setTimeout(resolve, plan.handlerDelayMs));
  },
});
consumer.on('processed', () => {
  processed++;
});
for (const name of ['processed', 'duplicate']) {
  consumer.on(name, (event) => send({ type: name, id: event.messageId }));
}
process.on('message', async (message) => {
  if (message?.type !== 'stop') return;
  await consumer.stop();
  await store.close();
  send({ type: 'stopped' });
  setTimeout(() => process.exit(0), 50);
});
try {
  await consumer.start();
  send({ type: 'ready' });
} catch (error) {
  send({ type: 'error', message: String(error?.stack ?? error) });
  setTimeout(() => process.exit(1), 50);
}
