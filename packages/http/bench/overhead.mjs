#!/usr/bin/env node
// The HTTP middleware's overhead per request against the same handler without it, on the
// real PostgreSQL. Build first (npx tsc -b packages/http packages/postgres), then:
//
//   node packages/http/bench/overhead.mjs [--seconds 2] [--rounds 3] [--concurrency 8]
//
// Every request does the same work: one transaction inserting one row, answering 201 JSON.
// Baseline: a bare node:http handler opening that transaction itself. Middleware: the same
// handler behind HttpIdempotency (transactional: the insert goes through req.tx; leased:
// the handler opens its own transaction), each request with a fresh key. Rounds alternate
// the scenarios so drift on a shared machine hits all of them; the figures are medians.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { parseArgs } from 'node:util';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import { HttpIdempotency } from '../dist/index.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '2' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '8' },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const concurrency = Number(values.concurrency);
const connectionString = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `bench_http_${randomUUID().replaceAll('-', '').slice(0, 12)}`;

const store = new PostgresStore({ connectionString, schema, poolMax: concurrency + 2 });
await store.migrate();
await store.transaction((tx) => tx.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY)`));

const insert = (tx, id) => tx.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [id]);
const answer = (res, id) => {
  res.writeHead(201, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ id }));
};

const scenarios = {
  baseline: http.createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      const id = randomUUID();
      await store.transaction((tx) => insert(tx, id));
      answer(res, id);
    });
  }),
  transactional: http.createServer(
    new HttpIdempotency({ store, scope: 'bench' }).handler(async (req, res) => {
      const id = randomUUID();
      await insert(req.tx, id);
      answer(res, id);
    }),
  ),
  leased: http.createServer(
    new HttpIdempotency({ store, mode: 'leased', scope: 'bench' }).handler(async (_req, res) => {
      const id = randomUUID();
      await store.transaction((tx) => insert(tx, id));
      answer(res, id);
    }),
  ),
};
await new HttpIdempotency({ store, scope: 'bench' }).migrate();
const urls = {};
for (const [name, server] of Object.entries(scenarios)) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  urls[name] = `http://127.0.0.1:${server.address().port}/orders`;
}

async function run(url) {
  const latencies = [];
  const end = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const start = performance.now();
        const response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() },
          body: '{"amount":40}',
        });
        await response.arrayBuffer();
        if (response.status !== 201) throw new Error(`unexpected ${response.status}`);
        latencies.push(performance.now() - start);
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  return {
    rate: latencies.length / seconds,
    p50: latencies[Math.floor(latencies.length * 0.5)],
    p99: latencies[Math.floor(latencies.length * 0.99)],
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = Object.fromEntries(Object.keys(scenarios).map((name) => [name, []]));
await run(urls.baseline); // warm-up
for (let round = 0; round < rounds; round++) {
  for (const name of Object.keys(scenarios)) results[name].push(await run(urls[name]));
}

const base = {
  rate: median(results.baseline.map((r) => r.rate)),
  p50: median(results.baseline.map((r) => r.p50)),
};
console.log(
  `| scenario (concurrency ${concurrency}, ${rounds}×${seconds}s, medians) | req/s | p50 ms | p99 ms | throughput vs baseline | p50 overhead |`,
);
console.log('|---|---|---|---|---|---|');
for (const [name, runs] of Object.entries(results)) {
  const rate = median(runs.map((r) => r.rate));
  const p50 = median(runs.map((r) => r.p50));
  const p99 = median(runs.map((r) => r.p99));
  console.log(
    `| ${name} | ${rate.toFixed(0)} | ${p50.toFixed(2)} | ${p99.toFixed(2)} | ${(rate / base.rate).toFixed(2)}× | ${(p50 - base.p50).toFixed(2)} ms |`,
  );
}

for (const server of Object.values(scenarios)) {
  server.closeAllConnections();
  server.close();
}
await store.close();
const admin = new pg.Client({ connectionString });
await admin.connect();
await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
await admin.end();
