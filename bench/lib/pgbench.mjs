// pgbench (the C client shipped with PostgreSQL) driving hand-written scripts: the SQL
// floor, with no Node.js or driver cost in it. Scripts run in simple-protocol mode because
// only that mode accepts `\;` (several statements in one round trip), which is how the
// store opens a transaction (`BEGIN ...; SET LOCAL lock_timeout = ...` in one message).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATABASE_URL } from './common.mjs';
import { LatencyRecorder } from './stats.mjs';

/** The pgbench binary: on PATH, or the Debian location of the server's own. */
export function findPgbench() {
  const onPath = spawnSync('pgbench', ['--version'], { encoding: 'utf8' });
  if (onPath.status === 0) return { path: 'pgbench', version: onPath.stdout.trim() };
  for (const major of ['17', '16', '15', '14', '13']) {
    const path = `/usr/lib/postgresql/${major}/bin/pgbench`;
    if (existsSync(path)) {
      const out = spawnSync(path, ['--version'], { encoding: 'utf8' });
      if (out.status === 0) return { path, version: out.stdout.trim() };
    }
  }
  return undefined;
}

/**
 * Runs one script for `seconds` with `clients` connections on one thread (like Node's one
 * event loop). Returns tps (excluding connection time) and per-transaction latencies from
 * pgbench's own transaction log (`-l`).
 */
export async function runPgbench({ pgbench, script, clients, seconds }) {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-pgbench-'));
  try {
    const file = join(dir, 'script.sql');
    writeFileSync(file, script);
    const args = [
      '--no-vacuum',
      '--protocol=simple',
      `--client=${clients}`,
      '--jobs=1',
      `--time=${seconds}`,
      `--file=${file}`,
      '--log',
      `--log-prefix=${join(dir, 'tx')}`,
      DATABASE_URL,
    ];
    const { code, stdout, stderr } = await run(pgbench.path, args);
    if (code !== 0 || /aborted/.test(stderr + stdout)) {
      throw new Error(`pgbench failed (exit ${code}):\n${stderr}\n${stdout}`);
    }
    const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)?.[1]);
    if (!Number.isFinite(tps)) throw new Error(`no tps in pgbench output:\n${stdout}`);
    const latency = new LatencyRecorder();
    for (const name of readdirSync(dir)) {
      if (!name.startsWith('tx')) continue;
      // Columns: client_id transaction_no latency_us script_no epoch_s epoch_us
      for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) {
        const fields = line.split(' ');
        if (fields.length >= 3) latency.record(Number(fields[2]) / 1000);
      }
    }
    // external: the work ran in pgbench's process, so this process's CPU says nothing about it.
    return { perSecond: tps, ops: latency.length, latency, external: true };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function run(command, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
