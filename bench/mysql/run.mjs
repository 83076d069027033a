#!/usr/bin/env node
// Scenario 8 — the MySQL store (@oncely/mysql) on MariaDB / MySQL.
//
//   node bench/mysql/run.mjs [--concurrency 1,8] [--rounds 8] [--seconds 0.75] [--batch 50]
//
// Per concurrency level (connections / transactions in flight), in interleaved rounds, on
// one mysql2 pool each, every connection set up the way MySqlStore sets up its sessions
// (READ COMMITTED, innodb_lock_wait_timeout 5):
//   bare        START TRANSACTION; INSERT the business row; COMMIT
//   by hand     the statements processOnce(MySqlStore) sends, written by hand: START
//               TRANSACTION; INSERT the marker; INSERT the business row; COMMIT
//   oncely      processOnce(MySqlStore, key, (tx) => tx.query(INSERT the business row))
//   batch of N  processBatchTogether(MySqlStore, ...): one transaction, one claim (a locking
//               read of the IDs that exist and one multi-row INSERT of the markers), one
//               multi-row INSERT of the business rows, one COMMIT: N messages
// Throughput counts applied messages (a batch of N is N). Targets (issue 31): oncely ≥
// 0.95× by hand (rate) at c=1 and c=8; batch of 50 ≥ 10× oncely per message. The ratio
// against bare is reported (the marker is one INSERT more per transaction).
//
// Needs MariaDB or MySQL at MYSQL_URL (default mysql://root@127.0.0.1:3306/test); every run
// uses a database of its own (bench_mysql_<random>) and drops it at the end.
import { processBatchTogether, processOnce } from '@oncely/core';
import { MySqlStore } from '@oncely/mysql';
import mysql from 'mysql2/promise';
import {
  emitResult,
  flags,
  interleaved,
  numberList,
  progress,
  runMain,
  runWindow,
  summarise,
  uniqueTag,
} from '../lib/common.mjs';
import { formatMs, formatRate, formatRatio, median, quartiles } from '../lib/stats.mjs';

const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const args = flags({ concurrency: '1,8', rounds: 8, seconds: 0.75, batch: 50 });
const LEVELS = numberList(args.concurrency);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const BATCH = Number(args.batch);
const HAND_TARGET = 0.95;
const BATCH_TARGET = 10;
const WARMUP_SECONDS = 0.3;

const schema = `bench_mysql_${uniqueTag()}`;
const payments = `\`${schema}\`.payments`;
const markers = `\`${schema}\`.processed_messages`;
const insertPayment = `INSERT INTO ${payments} (order_id, amount) VALUES (?, ?)`;
// The store's claimOne statement (packages/mysql/src/queries.ts), as processOnce sends it.
const insertMarker = `INSERT INTO ${markers} (consumer, message_id, status, processed_at) VALUES (?, ?, 'completed', UTC_TIMESTAMP(6))`;

/** A mysql2 pool whose sessions are set up as MySqlStore sets up its own. */
function handPool(max) {
  const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: max, maxIdle: max });
  pool.pool.on('connection', (connection) => {
    connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
    connection.query('SET SESSION innodb_lock_wait_timeout = 5');
  });
  return pool;
}

async function transactionByHand(pool, statements) {
  const connection = await pool.getConnection();
  try {
    await connection.query('START TRANSACTION');
    for (const [sql, params] of statements) await connection.query(sql, params);
    await connection.query('COMMIT');
  } catch (error) {
    await connection.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    connection.release();
  }
}

async function level(concurrency) {
  const bare = handPool(concurrency);
  const hand = handPool(concurrency);
  const store = new MySqlStore({ url: MYSQL_URL, schema, poolMax: concurrency });
  const batchStore = new MySqlStore({ url: MYSQL_URL, schema, poolMax: concurrency });
  const consumer = `bench-c${concurrency}`;
  const variantsFor = (seconds) => ({
    bare: () =>
      runWindow({
        concurrency,
        seconds,
        op: (seq) => transactionByHand(bare, [[insertPayment, [`bare-${seq}`, 40]]]),
      }),
    'by hand': () =>
      runWindow({
        concurrency,
        seconds,
        op: (seq) =>
          transactionByHand(hand, [
            [insertMarker, [consumer, `hand-${seq}`]],
            [insertPayment, [`hand-${seq}`, 40]],
          ]),
      }),
    oncely: () =>
      runWindow({
        concurrency,
        seconds,
        op: (seq) =>
          processOnce(store, { consumer, messageId: `m-${seq}` }, (tx) =>
            tx.query(insertPayment, [`m-${seq}`, 40]),
          ),
      }),
    [`batch of ${BATCH}`]: async () => {
      const window = await runWindow({
        concurrency,
        seconds,
        op: (seq) =>
          processBatchTogether(
            batchStore,
            consumer,
            Array.from({ length: BATCH }, (_, i) => ({
              messageId: `b-${seq}-${i}`,
              orderId: `b-${seq}-${i}`,
            })),
            async (fresh, tx) => {
              await tx.query(`INSERT INTO ${payments} (order_id, amount) VALUES ?`, [
                fresh.map((item) => [item.orderId, 40]),
              ]);
            },
          ),
      });
      // Messages, not transactions.
      return { ...window, perSecond: window.perSecond * BATCH, ops: window.ops * BATCH };
    },
  });
  // Warm-up: connections opened, the store's schema checked once.
  for (const run of Object.values(variantsFor(WARMUP_SECONDS))) await run();
  const rounds = await interleaved(ROUNDS, variantsFor(SECONDS), (round) =>
    progress(`  c=${concurrency}: round ${round + 1}/${ROUNDS}`),
  );
  await Promise.all([bare.end(), hand.end(), store.close(), batchStore.close()]);
  const summary = Object.fromEntries(Object.entries(rounds).map(([name, list]) => [name, summarise(list)]));
  const ratio = (a, b) => rounds[a].map((r, i) => r.perSecond / rounds[b][i].perSecond);
  const vsHand = ratio('oncely', 'by hand');
  const vsBare = ratio('oncely', 'bare');
  const batchSpeedup = ratio(`batch of ${BATCH}`, 'oncely');
  return {
    concurrency,
    summary,
    oncelyVsHand: median(vsHand),
    oncelyVsHandQuartiles: quartiles(vsHand),
    oncelyVsBare: median(vsBare),
    oncelyVsBareQuartiles: quartiles(vsBare),
    batchSpeedup: median(batchSpeedup),
    batchSpeedupQuartiles: quartiles(batchSpeedup),
    handPass: median(vsHand) >= HAND_TARGET,
    batchPass: median(batchSpeedup) >= BATCH_TARGET,
  };
}

async function main() {
  const admin = await mysql.createConnection({ uri: MYSQL_URL });
  const [[{ version }]] = await admin.query('SELECT VERSION() AS version');
  try {
    const setup = new MySqlStore({ url: MYSQL_URL, schema });
    await setup.migrate();
    await setup.close();
    await admin.query(`CREATE TABLE ${payments} (
      id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id VARCHAR(64) NOT NULL, amount INT NOT NULL)`);
    const levels = [];
    for (const concurrency of LEVELS) {
      progress(`mysql: c=${concurrency}`);
      levels.push(await level(concurrency));
    }
    print(version, levels);
    emitResult({
      scenario: 'mysql',
      server: version,
      rounds: ROUNDS,
      seconds: SECONDS,
      batch: BATCH,
      levels,
    });
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``).catch(() => {});
    await admin.end();
  }
}

function print(version, levels) {
  console.log(`\nMySQL store on ${version} (${ROUNDS} rounds of ${SECONDS} s, medians)\n`);
  console.log('| c | variant | msgs/s | p50 / p99 | ratio |');
  console.log('|---|---|---:|---:|---|');
  for (const l of levels) {
    const s = l.summary;
    const row = (name, ratio) =>
      console.log(
        `| ${l.concurrency} | ${name} | ${formatRate(s[name].perSecond)} | ${formatMs(s[name].p50)} / ${formatMs(s[name].p99)} | ${ratio} |`,
      );
    row('bare', '');
    row('by hand', '');
    row(
      'oncely',
      `${formatRatio(l.oncelyVsHand)} of by hand (target ≥ ${HAND_TARGET}×: ${l.handPass ? 'met' : 'missed'}); ${formatRatio(l.oncelyVsBare)} of bare`,
    );
    row(
      `batch of ${BATCH}`,
      `${formatRatio(l.batchSpeedup)} oncely per message (target ≥ ${BATCH_TARGET}×: ${l.batchPass ? 'met' : 'missed'})`,
    );
  }
}

runMain(main);
