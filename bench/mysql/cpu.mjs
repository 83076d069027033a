#!/usr/bin/env node
// Scenario 8's helper — Node CPU per transaction of the MySQL store, by hand against
// processOnce(MySqlStore), at c=1 (issue 31).
//
//   node bench/mysql/cpu.mjs [--variant both|hand|oncely] [--transactions 1500] [--rounds 6]
//
// Each round runs `transactions` transactions of each variant back to back on one
// connection and divides the process's CPU time (process.cpuUsage: user + system) by
// them: the client-side cost, less sensitive to a busy machine than a rate (the server's
// work is not in it). `by hand` sends what processOnce sends (START TRANSACTION, the
// marker INSERT, the business INSERT, COMMIT) on a mysql2 promise pool. One variant alone
// is the one to profile:
//
//   node --cpu-prof --cpu-prof-dir=/tmp/prof bench/mysql/cpu.mjs --variant oncely
//
// Needs MariaDB or MySQL at MYSQL_URL (default mysql://root@127.0.0.1:3306/test); a
// database of its own (bench_cpu_<random>), dropped at the end.
import { processOnce } from '@oncely/core';
import { MySqlStore } from '@oncely/mysql';
import mysql from 'mysql2/promise';
import { flags, runMain, uniqueTag } from '../lib/common.mjs';
import { median } from '../lib/stats.mjs';

const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const args = flags({ variant: 'both', transactions: 1500, rounds: 6 });
const TRANSACTIONS = Number(args.transactions);
const ROUNDS = Number(args.rounds);
const WARMUP = 200;

const schema = `bench_cpu_${uniqueTag()}`;
const payments = `\`${schema}\`.payments`;
const insertPayment = `INSERT INTO ${payments} (order_id, amount) VALUES (?, ?)`;
// The store's claimOne statement (packages/mysql/src/queries.ts), as processOnce sends it.
const insertMarker = `INSERT INTO \`${schema}\`.processed_messages (consumer, message_id, status, processed_at) VALUES (?, ?, 'completed', UTC_TIMESTAMP(6))`;

async function main() {
  const admin = await mysql.createConnection({ uri: MYSQL_URL });
  const hand = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 1, maxIdle: 1 });
  hand.pool.on('connection', (connection) => {
    connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
    connection.query('SET SESSION innodb_lock_wait_timeout = 5');
  });
  const store = new MySqlStore({ url: MYSQL_URL, schema, poolMax: 1 });
  try {
    await store.migrate();
    await admin.query(
      `CREATE TABLE ${payments} (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id VARCHAR(64) NOT NULL, amount INT NOT NULL)`,
    );
    let seq = 0;
    const variants = {
      'by hand': async () => {
        const id = `h-${seq++}`;
        const connection = await hand.getConnection();
        try {
          await connection.query('START TRANSACTION');
          await connection.query(insertMarker, ['cpu', id]);
          await connection.query(insertPayment, [id, 40]);
          await connection.query('COMMIT');
        } catch (error) {
          await connection.query('ROLLBACK').catch(() => {});
          throw error;
        } finally {
          connection.release();
        }
      },
      oncely: () => {
        const id = `o-${seq++}`;
        return processOnce(store, { consumer: 'cpu', messageId: id }, (tx) =>
          tx.query(insertPayment, [id, 40]),
        );
      },
    };
    const wanted = { both: ['by hand', 'oncely'], hand: ['by hand'], oncely: ['oncely'] }[args.variant];
    if (!wanted) throw new Error(`--variant: both, hand or oncely; got ${args.variant}`);
    const chosen = Object.entries(variants).filter(([name]) => wanted.includes(name));
    for (const [, run] of chosen) for (let i = 0; i < WARMUP; i++) await run();
    const perRound = Object.fromEntries(chosen.map(([name]) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, run] of chosen) {
        const start = process.cpuUsage();
        for (let i = 0; i < TRANSACTIONS; i++) await run();
        const used = process.cpuUsage(start);
        perRound[name].push((used.user + used.system) / TRANSACTIONS);
      }
    }
    console.log(`\nNode CPU per transaction, c=1 (${ROUNDS} rounds of ${TRANSACTIONS}; µs)\n`);
    console.log('| variant | median | rounds |');
    console.log('|---|---:|---|');
    for (const [name, list] of Object.entries(perRound)) {
      console.log(`| ${name} | ${median(list).toFixed(0)} | ${list.map((v) => v.toFixed(0)).join(' ')} |`);
    }
  } finally {
    await hand.end();
    await store.close();
    await admin.query(`DROP DATABASE IF EXISTS \`${schema}\``).catch(() => {});
    await admin.end();
  }
}

runMain(main);
