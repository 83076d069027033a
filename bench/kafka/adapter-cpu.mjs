// The adapter's own CPU per record, without broker or database: KafkaAdapter's eachBatch
// loop over one in-memory batch, every record acked at once by a stand-in core.
//
//   node bench/kafka/adapter-cpu.mjs [--records 200000] [--rounds 5]
import { parseArgs } from 'node:util';
import { silentLogger } from '@oncely/core';

// --compare: builds of the adapter (absolute paths to their dist/index.js, comma-separated)
// measured in alternation with the installed one, in this process.

const { values: args } = parseArgs({
  options: {
    records: { type: 'string', default: '200000' },
    rounds: { type: 'string', default: '5' },
    compare: { type: 'string', default: '' },
  },
});
const RECORDS = Number(args.records);

const builds = [['@oncely/kafka', await import('@oncely/kafka')]];
for (const path of args.compare.split(',').filter(Boolean)) builds.push([path, await import(path)]);

function adapterWithStandInCore({ KafkaAdapter }) {
  const adapter = new KafkaAdapter(
    { type: 'kafka', brokers: ['127.0.0.1:1'], topic: 't' },
    { consumerName: 'cpu', log: silentLogger },
  );
  let inFlight = 0;
  const runtime = {
    consumerName: 'cpu',
    concurrency: 4,
    mode: 'transactional',
    log: silentLogger,
    stopping: new AbortController().signal,
    whenReady: async () => 4 - inFlight,
    dispatch: async (delivery) => {
      inFlight++;
      await delivery.ack();
      inFlight--;
    },
    reportError: () => {},
  };
  // Private state a started adapter has: the runtime and a generation owning partition 0.
  adapter.runtime = runtime;
  adapter.generation = adapter.newGeneration(new Set([0]));
  adapter.lastHeartbeatAt = Date.now();
  adapter.consumer = { commitOffsets: async () => {} };
  return adapter;
}

function batchOf(count) {
  const value = Buffer.from(JSON.stringify({ orderId: 'o-1', amount: 40, note: 'x'.repeat(100) }));
  const messages = [];
  for (let n = 0; n < count; n++) {
    messages.push({
      offset: String(n),
      key: null,
      value,
      timestamp: '1700000000000',
      attributes: 0,
      headers: { 'message-id': Buffer.from(`m-${n}`) },
    });
  }
  return { topic: 't', partition: 0, messages, lastOffset: () => String(count - 1) };
}

const batch = batchOf(RECORDS);
const payload = {
  batch,
  resolveOffset: () => {},
  heartbeat: async () => {},
  pause: () => () => {},
  commitOffsetsIfNecessary: async () => {},
  uncommittedOffsets: () => ({ topics: [] }),
  isRunning: () => true,
  isStale: () => false,
};
const perRecord = builds.map(() => []);
for (let round = 0; round < Number(args.rounds); round++) {
  for (const [index, [, build]] of builds.entries()) {
    const adapter = adapterWithStandInCore(build);
    const cpu = process.cpuUsage();
    await adapter.processBatch(payload);
    const used = process.cpuUsage(cpu);
    perRecord[index].push((used.user + used.system) / RECORDS);
  }
}
// The minimum is the least disturbed by other processes on a shared machine.
for (const [index, [name]] of builds.entries()) {
  const sorted = [...perRecord[index]].sort((a, b) => a - b);
  console.log(
    `${name}: adapter CPU µs per record (${RECORDS} records, ${sorted.length} rounds): min ${sorted[0].toFixed(2)}, median ${sorted[Math.floor(sorted.length / 2)].toFixed(2)}`,
  );
}
