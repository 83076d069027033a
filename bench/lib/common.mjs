// Shared plumbing of the scenarios: settings from the environment, unique names, the
// timed closed-loop driver, interleaved rounds, and how a scenario hands its numbers to
// bench/run.mjs (a JSON file named by BENCH_RESULT_FILE).
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { LatencyRecorder, median } from './stats.mjs';

// Read through `env`: run-time knobs of a script, not inputs of a turbo task.
const { env } = process;

export const DATABASE_URL = env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Six hex characters, for schema, queue and key names no other run uses. */
export function uniqueTag() {
  return randomBytes(3).toString('hex');
}

/**
 * Parses `--name value` flags with defaults; every value stays a string (numbers and
 * lists are converted by the caller).
 */
export function flags(defaults) {
  const options = Object.fromEntries(
    Object.entries(defaults).map(([name, value]) => [name, { type: 'string', default: String(value) }]),
  );
  return parseArgs({ options, allowPositionals: false }).values;
}

/** `'1,8,32'` → `[1, 8, 32]`. */
export function numberList(text) {
  return String(text)
    .split(',')
    .map((part) => Number(part.trim()))
    .filter((n) => Number.isFinite(n) && n > 0);
}

/**
 * Closed loop: `concurrency` workers call `op(seq)` back to back until `seconds` have
 * passed; `seq` is a process-wide counter so message IDs never repeat. Returns the number
 * of completed operations, the elapsed wall time and every operation's latency.
 */
export async function runWindow({ concurrency, seconds, op }) {
  const latency = new LatencyRecorder();
  const deadline = performance.now() + seconds * 1000;
  let ops = 0;
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  const worker = async () => {
    while (performance.now() < deadline) {
      const seq = nextSeq();
      const t0 = performance.now();
      await op(seq);
      latency.record(performance.now() - t0);
      ops++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsedMs = performance.now() - started;
  // CPU this process used (user + system, all threads) per operation: unlike wall time it
  // does not grow when other work on the machine delays us.
  const cpu = process.cpuUsage(cpuBefore);
  const cpuUsPerOp = (cpu.user + cpu.system) / ops;
  // Resident set of the Node process at the end of the window (MB): the variant's
  // connections, buffers and garbage not yet collected.
  const rssMb = process.memoryUsage.rss() / 2 ** 20;
  return { ops, elapsedMs, perSecond: ops / (elapsedMs / 1000), latency, cpuUsPerOp, rssMb };
}

let seqCounter = 0;
/** Next value of the process-wide operation counter. */
export function nextSeq() {
  return seqCounter++;
}

/**
 * Runs every variant once per round, in rotated order (round 0: a b c, round 1: b c a,
 * ...), so a slow period of the shared machine hits each variant about equally. Returns,
 * per variant name, the list of per-round results.
 */
export async function interleaved(rounds, variants, onRound) {
  const names = Object.keys(variants);
  const results = Object.fromEntries(names.map((name) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    const order = names.map((_, i) => names[(i + round) % names.length]);
    for (const name of order) {
      const cpuBefore = process.cpuUsage();
      const result = await variants[name](round);
      // Variants that do not time their own CPU (the broker loops) get this process's CPU
      // per message over the whole variant run, set-up included, and the RSS after it.
      if (result && !result.external && result.ops > 0) {
        if (result.cpuUsPerOp === undefined) {
          const cpu = process.cpuUsage(cpuBefore);
          result.cpuUsPerOp = (cpu.user + cpu.system) / result.ops;
        }
        result.rssMb ??= process.memoryUsage.rss() / 2 ** 20;
      }
      results[name].push(result);
    }
    onRound?.(round, results);
  }
  return results;
}

/**
 * Summarises the rounds of one variant: median rate (and client CPU per operation) over
 * rounds, latency percentiles over every operation of every round.
 */
export function summarise(roundResults) {
  const pooled = new LatencyRecorder();
  for (const result of roundResults) if (result.latency) pooled.merge(result.latency);
  const latency = pooled.summary();
  const cpu = roundResults.map((r) => r.cpuUsPerOp).filter((x) => x !== undefined);
  const rss = roundResults.map((r) => r.rssMb).filter((x) => x !== undefined);
  return {
    perSecond: median(roundResults.map((r) => r.perSecond)),
    cpuUsPerOp: cpu.length ? median(cpu) : undefined,
    rssMb: rss.length ? median(rss) : undefined,
    rounds: roundResults.map((r) => Math.round(r.perSecond)),
    p50: latency.p50,
    p99: latency.p99,
    ops: roundResults.reduce((sum, r) => sum + (r.ops ?? 0), 0),
  };
}

/** Median over rounds of `baseline rate / candidate rate` (>1: the candidate is slower). */
export function medianRatio(baselineRounds, candidateRounds) {
  const ratios = baselineRounds.map((b, i) => b.perSecond / candidateRounds[i].perSecond);
  return median(ratios);
}

/** Writes the scenario's result where bench/run.mjs asked for it (no-op when run alone). */
export function emitResult(result) {
  // The scenario process as a whole: peak resident set and CPU time (user + system).
  const usage = process.resourceUsage();
  const processStats = {
    maxRssMb: usage.maxRSS / 1024,
    cpuSeconds: (usage.userCPUTime + usage.systemCPUTime) / 1e6,
    wallSeconds: process.uptime(),
  };
  if (env.BENCH_RESULT_FILE) {
    writeFileSync(
      env.BENCH_RESULT_FILE,
      `${JSON.stringify({ ...result, process: processStats }, null, 2)}\n`,
    );
  }
}

/** Progress goes to stderr so stdout stays the scenario's table. */
export function progress(message) {
  process.stderr.write(`${message}\n`);
}

/** Runs `main`, sets a failing exit code on error, and exits once cleanup is done. */
export function runMain(main) {
  main().then(
    () => process.exit(process.exitCode ?? 0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}
