// Preloaded into every Node process of a test run by scripts/cpu-profile.sh (NODE_OPTIONS
// --require): at exit, one JSON line with the process's own CPU time and that of the
// children it reaped (every descendant, Node or not: a JVM, psql, npm), and the test file
// when the process is a vitest worker. Off unless CPU_PROFILE_LOG names the file (no ONCELY_
// prefix: Oncely's configuration refuses ONCELY_ names it does not know).
'use strict';
const fs = require('node:fs');
const log = process.env.CPU_PROFILE_LOG;
if (log) {
  const started = Date.now();
  let recorded = false;
  const record = () => {
    if (recorded) return;
    recorded = true;
    try {
      const usage = process.cpuUsage();
      // /proc/self/stat fields 16 and 17 (cutime, cstime): reaped children, in clock ticks.
      const stat = fs.readFileSync('/proc/self/stat', 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks = 100;
      const childrenMs = ((Number(fields[13]) + Number(fields[14])) * 1000) / ticks;
      const worker = globalThis.__vitest_worker__;
      const files = (worker?.ctx?.files ?? []).map((f) => (typeof f === 'string' ? f : f.filepath));
      if (worker?.filepath && !files.includes(worker.filepath)) files.push(worker.filepath);
      const line = {
        pid: process.pid,
        ppid: process.ppid,
        argv: process.argv.slice(1, 4).join(' ').slice(0, 200),
        selfMs: Math.round((usage.user + usage.system) / 1000),
        childrenMs: Math.round(childrenMs),
        wallMs: Date.now() - started,
        files,
      };
      fs.appendFileSync(log, `${JSON.stringify(line)}\n`);
    } catch {
      // A profile line lost is not worth a failing process.
    }
  };
  process.on('exit', record);
  // vitest ends its workers with SIGTERM, which skips 'exit': record, then die of the signal
  // as before unless the process has a SIGTERM handler of its own.
  const onTerm = () => {
    record();
    if (process.listenerCount('SIGTERM') === 1) {
      process.removeListener('SIGTERM', onTerm);
      process.kill(process.pid, 'SIGTERM');
    }
  };
  process.on('SIGTERM', onTerm);
}
