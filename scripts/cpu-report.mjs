// The table of scripts/cpu-profile.sh: reads its directory (processes.jsonl, /proc/stat
// and server counters before and after) and prints CPU seconds by where they went.
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const dir = process.argv[2];
const root = join(import.meta.dirname, '..');
const read = (name) => readFileSync(join(dir, name), 'utf8');
const TICK = 100; // USER_HZ

const cpuOf = (line) => {
  const [, user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).map(Number);
  return { busy: user + nice + system + irq + softirq + steal, idle: idle + iowait };
};
const before = cpuOf(read('stat.before'));
const after = cpuOf(read('stat.after'));
const busy = (after.busy - before.busy) / TICK;
const idle = (after.idle - before.idle) / TICK;
const wall = Number(read('wall'));

const processes = read('processes.jsonl')
  .split('\n')
  .filter(Boolean)
  .map((line) => JSON.parse(line));
const byPid = new Map(processes.map((p) => [p.pid, p]));
const workers = processes.filter((p) => p.files.length > 0);
const workerPids = new Set(workers.map((w) => w.pid));
/** The vitest worker a process descends from, if any (its CPU is that file's). */
const workerOf = (p) => {
  for (let q = byPid.get(p.ppid), hops = 0; q && hops < 20; q = byPid.get(q.ppid), hops++)
    if (workerPids.has(q.pid)) return q;
  return undefined;
};

const files = new Map();
for (const w of workers) {
  const key = w.files.map((f) => relative(root, f).replace(/^.*?\/p\//, '')).join(', ');
  files.set(key, (files.get(key) ?? 0) + (w.selfMs + w.childrenMs) / 1000);
}
// Everything else: each Node process outside any worker, by what it ran, its own CPU only
// (a parent's reaped children include Node processes that log themselves, and a shell in
// between hides which). Non-Node processes outside the workers (JVMs, exited database
// backends) are in the remainder.
const kinds = new Map();
const kindOf = (argv) => {
  if (/vitest\.mjs|\.bin\/vitest|vitest\/vitest/.test(argv)) return 'vitest main process';
  if (/tsc|typescript/.test(argv)) return 'tsc';
  if (/turbo/.test(argv)) return 'turbo';
  if (/npm-cli|npx-cli/.test(argv)) return 'npm/npx';
  if (/biome/.test(argv)) return 'biome';
  return argv.split(' ')[0].split('/').slice(-3).join('/') || '(node -e / stdin)';
};
for (const p of processes) {
  if (workerPids.has(p.pid)) continue;
  if (workerOf(p)) continue; // in its file's worker's reaped children
  const kind = kindOf(p.argv);
  kinds.set(kind, (kinds.get(kind) ?? 0) + p.selfMs / 1000);
}
const servers = (name) => {
  const m = new Map();
  for (const line of read(name).split('\n').filter(Boolean)) {
    const ticks = Number(line.split(' ').pop());
    const kind = line.split(' ')[0].split('/').pop();
    m.set(kind, (m.get(kind) ?? 0) + ticks);
  }
  return m;
};
const sb = servers('servers.before');
const sa = servers('servers.after');

const fmt = (n) => n.toFixed(0).padStart(7);
console.log(`\nwall ${wall} s; machine CPU busy ${busy.toFixed(0)} s, idle ${idle.toFixed(0)} s`);
const fileSum = [...files.values()].reduce((a, b) => a + b, 0);
console.log(`\ntest files (worker + everything it started): ${fileSum.toFixed(0)} s`);
for (const [k, v] of [...files].sort((a, b) => b[1] - a[1]).slice(0, 60)) console.log(`${fmt(v)}  ${k}`);
const otherSum = [...kinds.values()].reduce((a, b) => a + b, 0);
console.log(`\nother Node processes (own CPU): ${otherSum.toFixed(0)} s`);
for (const [k, v] of [...kinds].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${fmt(v)}  ${k}`);
let serverSum = 0;
console.log('\nshared servers (processes alive at both reads; exited backends are not counted):');
for (const [k, v] of sa) {
  const used = (v - (sb.get(k) ?? 0)) / TICK;
  serverSum += used;
  console.log(`${fmt(used)}  ${k}`);
}
console.log(
  `\nremainder (JVMs, exited backends, shells, the kernel): ${(busy - fileSum - otherSum - serverSum).toFixed(0)} s`,
);
