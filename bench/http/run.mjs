#!/usr/bin/env node
// Scenario 6 — the HTTP Idempotency-Key middleware's overhead per request against the same
// handler without it, on the real PostgreSQL.
//
//   node bench/http/run.mjs [--concurrency 1,8] [--rounds 5] [--seconds 1.5]
//
// Every request does the same work: one transaction inserting one row, answering 201 JSON,
// on a node:http server in this process driven by fetch (keep-alive) from this process.
//   bare           the handler opens the transaction itself (store.transaction on the same
//                  PostgresStore pool): no key, no middleware
//   transactional  the same handler behind HttpIdempotency.handler() in transactional mode
//                  (the insert goes through req.tx, in the key's transaction), a fresh
//                  Idempotency-Key per request
//   leased         behind HttpIdempotency in leased mode: the handler opens its own
//                  transaction as in bare, the key is claimed and completed around it
//   replay         a retry of a key already answered: the stored response, no handler
// Rounds are interleaved (round 1: a b c d, round 2: b c d a, ...). Reported per level: the
// median per-round ratio bare rate / candidate rate, and the p50 / p99 latency difference
// (the overhead per request).
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { HttpIdempotency } from '@oncely/http';
import { PostgresStore } from '@oncely/postgres';
import {
  DATABASE_URL,
  emitResult,
  flags,
  interleaved,
  medianRatio,
  numberList,
  progress,
  runMain,
  runWindow,
  summarise,
  uniqueTag,
} from '../lib/common.mjs';
import { dropSchema, serverVersion } from '../lib/pg.mjs';
import { formatMs, formatRate, formatRatio } from '../lib/stats.mjs';

const args = flags({ concurrency: '1,8', rounds: 5, seconds: 1.5 });
const LEVELS = numberList(args.concurrency);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const WARMUP_SECONDS = 0.3;
const REPLAY_KEYS = 200;

const schema = `bench_http_${uniqueTag()}`;

function answer(res, id) {
  res.writeHead(201, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ id }));
}

/** The servers, all on one store (pool sized for the largest level plus the middleware's own work). */
async function startServers(store) {
  const insert = (tx, id) => tx.query(`INSERT INTO "${schema}".orders (id) VALUES ($1)`, [id]);
  const transactional = new HttpIdempotency({ store, scope: 'bench' });
  const leased = new HttpIdempotency({ store, mode: 'leased', scope: 'bench' });
  await transactional.migrate();
  const handlers = {
    bare: (req, res) => {
      req.resume();
      req.on('end', async () => {
        const id = randomUUID();
        try {
          await store.transaction((tx) => insert(tx, id));
          answer(res, id);
        } catch (error) {
          res.writeHead(500).end(String(error));
        }
      });
    },
    transactional: transactional.handler(async (req, res) => {
      const id = randomUUID();
      await insert(req.tx, id);
      answer(res, id);
    }),
    leased: leased.handler(async (_req, res) => {
      const id = randomUUID();
      await store.transaction((tx) => insert(tx, id));
      answer(res, id);
    }),
  };
  const servers = {};
  const urls = {};
  for (const [name, handler] of Object.entries(handlers)) {
    const server = http.createServer(handler);
    server.keepAliveTimeout = 5000;
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers[name] = server;
    urls[name] = `http://127.0.0.1:${server.address().port}/orders`;
  }
  return { servers, urls };
}

async function post(url, key) {
  const headers = { 'content-type': 'application/json' };
  if (key) headers['idempotency-key'] = key;
  const response = await fetch(url, { method: 'POST', headers, body: '{"amount":40}' });
  await response.arrayBuffer();
  if (response.status !== 201) throw new Error(`${url}: HTTP ${response.status}`);
  return response;
}

async function main() {
  const store = new PostgresStore({
    connectionString: DATABASE_URL,
    schema,
    poolMax: Math.max(...LEVELS) * 2 + 2,
  });
  const levels = [];
  let pg;
  let started;
  try {
    pg = await serverVersion().catch(() => undefined);
    await store.migrate();
    await store.transaction((tx) => tx.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY)`));
    started = await startServers(store);
    const { urls } = started;
    // Keys answered once, for the replay variant.
    const replayKeys = Array.from({ length: REPLAY_KEYS }, () => randomUUID());
    for (const key of replayKeys) await post(urls.transactional, key);

    for (const concurrency of LEVELS) {
      progress(`http: concurrency ${concurrency}, ${ROUNDS} interleaved rounds...`);
      const variant = (op) => async () => {
        await runWindow({ concurrency, seconds: WARMUP_SECONDS, op });
        return runWindow({ concurrency, seconds: SECONDS, op });
      };
      const rounds = await interleaved(
        ROUNDS,
        {
          bare: variant(() => post(urls.bare)),
          transactional: variant(() => post(urls.transactional, randomUUID())),
          leased: variant(() => post(urls.leased, randomUUID())),
          replay: variant(async (seq) => {
            const response = await post(urls.transactional, replayKeys[seq % REPLAY_KEYS]);
            if (response.headers.get('idempotent-replayed') !== 'true') throw new Error('not a replay');
          }),
        },
        (round, results) =>
          progress(
            `  round ${round + 1}: ${Object.entries(results)
              .map(([name, list]) => `${name} ${Math.round(list[round].perSecond)}/s`)
              .join(', ')}`,
          ),
      );
      const summary = Object.fromEntries(
        Object.entries(rounds).map(([name, list]) => [name, summarise(list)]),
      );
      const vsBare = {};
      const overheadMs = {};
      for (const name of ['transactional', 'leased', 'replay']) {
        vsBare[name] = medianRatio(rounds.bare, rounds[name]);
        overheadMs[name] = {
          p50: summary[name].p50 - summary.bare.p50,
          p99: summary[name].p99 - summary.bare.p99,
        };
      }
      levels.push({ concurrency, summary, vsBare, overheadMs });
    }
  } finally {
    for (const server of Object.values(started?.servers ?? {})) {
      server.closeAllConnections();
      server.close();
    }
    await store.close();
    await dropSchema(schema);
  }
  print(levels, pg);
  emitResult({
    scenario: 'http',
    postgres: pg?.version,
    settings: {
      levels: LEVELS,
      rounds: ROUNDS,
      seconds: SECONDS,
      work: 'one INSERT in one transaction, 201 JSON',
    },
    levels,
  });
}

function print(levels, pg) {
  console.log(
    `\nScenario 6 — HTTP Idempotency-Key middleware overhead (PostgreSQL ${pg?.version ?? '?'}; medians of ${ROUNDS} interleaved rounds of ${SECONDS} s)`,
  );
  console.log('c   variant         req/s   vs bare   p50 ms   p99 ms   p50 overhead ms   p99 overhead ms');
  for (const level of levels) {
    for (const [name, s] of Object.entries(level.summary)) {
      const ratio = name === 'bare' ? 1 : level.vsBare[name];
      const over = level.overheadMs[name];
      console.log(
        `${String(level.concurrency).padEnd(3)} ${name.padEnd(14)} ${formatRate(s.perSecond).padStart(6)} ${formatRatio(ratio).padStart(9)} ${formatMs(s.p50).padStart(8)} ${formatMs(s.p99).padStart(8)} ${(over ? formatMs(over.p50) : '—').padStart(17)} ${(over ? formatMs(over.p99) : '—').padStart(17)}`,
      );
    }
  }
}

runMain(main);
