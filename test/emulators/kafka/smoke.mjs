// Smoke test: kafkajs 2.2.4 against the test broker. Checks what @oncely/kafka relies on:
// topic creation, (idempotent) produce, a consumer group with eachBatch and manual
// commits, a rebalance when a second member joins and when it leaves, committed offsets
// read back, seek, and a transactional producer with sendOffsets (Kafka EOS).
//   node test/emulators/kafka/smoke.mjs [broker]     (default $KAFKA_BROKERS or 127.0.0.1:19092)
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(
  fileURLToPath(new URL('../../../packages/kafka/package.json', import.meta.url)),
);
const { Kafka, logLevel } = require('kafkajs');

const broker = process.argv[2] ?? process.env.KAFKA_BROKERS?.split(',')[0] ?? '127.0.0.1:19092';
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const kafka = new Kafka({ clientId: 'oncely-smoke', brokers: [broker], logLevel: logLevel.NOTHING });
const run = randomUUID().slice(0, 8);
const topic = `smoke-${run}`;
const groupId = `smoke-group-${run}`;
const started = Date.now();
const step = (msg) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}`);

async function until(what, predicate, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const admin = kafka.admin();
await admin.connect();
assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 4 }], waitForLeaders: true }), true);
step(`created ${topic} (4 partitions)`);

const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
await producer.connect();
const N = 200;
await producer.send({
  topic,
  acks: -1,
  messages: Array.from({ length: N }, (_, i) => ({
    key: `k${i % 16}`,
    value: `v${i}`,
    headers: { 'message-id': `m${i}` },
  })),
});
step(`produced ${N} records (idempotent producer)`);

const seen = new Map(); // message-id -> count
const assignments = { a: [], b: [] };
function makeConsumer(name) {
  const c = kafka.consumer({
    groupId,
    sessionTimeout: 6000,
    heartbeatInterval: 500,
    rebalanceTimeout: 10000,
    maxWaitTimeInMs: 500,
  });
  c.on(c.events.GROUP_JOIN, (e) => {
    assignments[name] = e.payload.memberAssignment[topic] ?? [];
  });
  return c;
}
async function runConsumer(c, slow) {
  await c.connect();
  await c.subscribe({ topics: [topic], fromBeginning: true });
  await c.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    partitionsConsumedConcurrently: 4,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isStale, commitOffsetsIfNecessary }) => {
      for (const m of batch.messages) {
        if (isStale()) return;
        const id = m.headers['message-id'].toString();
        seen.set(id, (seen.get(id) ?? 0) + 1);
        resolveOffset(m.offset);
        if (slow) await new Promise((r) => setTimeout(r, 5));
        await heartbeat();
      }
      // autoCommit:false ⇒ commitOffsetsIfNecessary is a no-op; commit explicitly.
      await c.commitOffsets([
        { topic, partition: batch.partition, offset: String(Number(batch.lastOffset()) + 1) },
      ]);
      await commitOffsetsIfNecessary();
    },
  });
}

const a = makeConsumer('a');
await runConsumer(a, true);
await until('consumer a to be assigned all 4 partitions', () => assignments.a.length === 4);
step('consumer a joined and owns all 4 partitions');
const b = makeConsumer('b');
await runConsumer(b, true);
await until(
  'a rebalance splitting the partitions',
  () => assignments.b.length > 0 && assignments.a.length + assignments.b.length === 4,
);
step(`rebalance on join: a=${assignments.a} b=${assignments.b}`);
await until('every record consumed', () => seen.size === N);
step(`consumed ${seen.size} distinct records (${[...seen.values()].reduce((x, y) => x + y, 0)} deliveries)`);

await until('committed offsets to reach the end', async () => {
  const offs = await admin.fetchOffsets({ groupId, topics: [topic] });
  const total = offs[0].partitions.reduce((s, p) => s + Number(p.offset), 0);
  return total === N;
});
step('committed offsets sum to the record count');

await b.disconnect();
await until('a to own all partitions again', () => assignments.a.length === 4);
step('rebalance on leave: a owns all 4 partitions again');
const before = seen.size;
await producer.send({ topic, messages: [{ key: 'late', value: 'late', headers: { 'message-id': 'late' } }] });
await until('the late record after the rebalance', () => seen.has('late'));
assert.equal(seen.size, before + 1);
step('the survivor consumes new records');

// seek on the running consumer: redelivers partition 0 from 0.
const redeliveredBefore = [...seen.values()].reduce((x, y) => x + y, 0);
a.seek({ topic, partition: 0, offset: '0' });
await until(
  'records re-delivered after seek',
  () => [...seen.values()].reduce((x, y) => x + y, 0) > redeliveredBefore,
);
step('seek re-delivers from the requested offset');
await a.disconnect();

// Transactions: consume-transform-produce with offsets committed in the transaction.
const out = `${topic}-out`;
await admin.createTopics({ topics: [{ topic: out, numPartitions: 1 }], waitForLeaders: true });
const txProducer = kafka.producer({
  transactionalId: `smoke-tx-${run}`,
  idempotent: true,
  maxInFlightRequests: 1,
});
await txProducer.connect();
const tx = await txProducer.transaction();
await tx.send({ topic: out, messages: [{ value: 'x' }] });
await tx.sendOffsets({
  consumerGroupId: `${groupId}-tx`,
  topics: [{ topic, partitions: [{ partition: 0, offset: '5' }] }],
});
await tx.commit();
// The offset becomes visible once the coordinator has written the commit marker.
await until('the transactional offset commit to become visible', async () => {
  const txOffs = await admin.fetchOffsets({ groupId: `${groupId}-tx`, topics: [topic] });
  return txOffs[0].partitions.find((p) => p.partition === 0).offset === '5';
});
step('transactional produce + sendOffsets committed');
await txProducer.disconnect();

await producer.disconnect();
await admin.deleteTopics({ topics: [topic, out] });
await admin.disconnect();
step('smoke test passed');
