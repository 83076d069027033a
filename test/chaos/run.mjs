#!/usr/bin/env node
/**
 * `npm run chaos -- --broker <memory|rabbitmq|kafka|sqs|all> --messages N --consumers K --kills M [...]`
 *
 * Runs the chaos scenario (see README.md) against each broker named, prints one table
 * row per broker and the details of each run. Exits 1 when any run lost or doubled an
 * effect (or did not drain, or left a poison message unaccounted for), 2 on a bad
 * command line or a broker that has no adapter yet.
 */
import { parseArgs } from 'node:util';
import { ChaosUsageError, checkBroker, landedBrokers, resolveOptions } from './lib/options.mjs';
import { formatDetails, formatTable } from './lib/report.mjs';
import { runChaos } from './lib/runChaos.mjs';

const USAGE = `usage: npm run chaos -- --broker <memory|rabbitmq|kafka|sqs|all> [options]

  --broker B            broker to run against; repeat it or use 'all' for every landed broker
  --messages N          distinct orders (default 1000)
  --consumers K         consumer processes at once (default 3)
  --kills M             SIGKILLs while messages flow, a third each at random moments, before
                        a commit and between commit and ack (default 6)
  --concurrency C       handlers in flight per consumer (default 6)
  --seed S              seeds the orders and every fault decision (default 42)
  --duplicates R        share of orders the producer publishes 2-3 times (default 0.1)
  --poison P            poison messages (no ID, unparseable body) (default 4)
  --ack-loss R          share of acks lost after the commit (default 0.02)
  --stall R             share of handlers that stall longer than the lease (default 0.003)
  --db-cut-ms MS        how long the database is cut (default 3000)
  --no-db-cut           no database cut
  --no-broker-drop      no broker connection drops
  --no-broker-restart   no broker restart (Kafka, fauxqs)
  --kafka-client C      the Kafka consumers' client: kafkajs (default) or platformatic
                        (@platformatic/kafka: the consumer processes need Node >= 22.22)
  --child-node PATH     the Node binary the consumer processes run on (default: this one;
                        or ONCELY_CHAOS_CHILD_NODE)
  --store S             postgres (default, DATABASE_URL) or mysql (@oncely/mysql, MYSQL_URL)
  --pg-restart          also restart PostgreSQL mid-run (pg_ctlcluster 15 main restart):
                        hand runs only, refused under CI=true; it breaks whatever else uses the server
  --defect D            a deliberately broken consumer: ack-before-commit | marker-separate-commit |
                        no-idempotency-key (the run must then report lost or doubled effects)
  --timeout-ms MS       give up waiting for the broker to drain (default 120 s + 40 ms/message + 8 s/kill)
  --log-dir DIR         keep consumer logs here (default: a temp dir, removed when the run passes)
  --keep                keep the database schema even when the run passes
  --json FILE           also write the results as JSON
  --quiet               no progress lines`;

async function main() {
  const { values } = parseArgs({
    options: {
      broker: { type: 'string', multiple: true },
      messages: { type: 'string' },
      consumers: { type: 'string' },
      kills: { type: 'string' },
      concurrency: { type: 'string' },
      seed: { type: 'string' },
      duplicates: { type: 'string' },
      poison: { type: 'string' },
      'ack-loss': { type: 'string' },
      stall: { type: 'string' },
      'db-cut-ms': { type: 'string' },
      'no-db-cut': { type: 'boolean' },
      'no-broker-drop': { type: 'boolean' },
      'no-broker-restart': { type: 'boolean' },
      'pg-restart': { type: 'boolean' },
      store: { type: 'string' },
      'kafka-client': { type: 'string' },
      'child-node': { type: 'string' },
      defect: { type: 'string' },
      'timeout-ms': { type: 'string' },
      'log-dir': { type: 'string' },
      keep: { type: 'boolean' },
      json: { type: 'string' },
      quiet: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const requested = values.broker ?? [];
  if (requested.length === 0) throw new ChaosUsageError(`--broker is required\n\n${USAGE}`);
  const brokers = requested.flatMap((b) => (b === 'all' ? landedBrokers() : [b]));
  // Refuse unknown or not-yet-existing brokers before anything runs.
  for (const broker of brokers) checkBroker(broker);

  const common = {
    messages: num(values.messages),
    consumers: num(values.consumers),
    kills: num(values.kills),
    concurrency: num(values.concurrency),
    seed: num(values.seed),
    duplicateShare: num(values.duplicates),
    poison: num(values.poison),
    ackLoss: num(values['ack-loss']),
    stallRate: num(values.stall),
    dbCutMs: num(values['db-cut-ms']),
    dbCut: values['no-db-cut'] ? false : undefined,
    brokerDrop: values['no-broker-drop'] ? false : undefined,
    brokerRestart: values['no-broker-restart'] ? false : undefined,
    pgRestart: values['pg-restart'] ? true : undefined,
    store: /** @type {any} */ (values.store),
    kafkaClient: /** @type {any} */ (values['kafka-client']),
    childNode: values['child-node'],
    defect: values.defect,
    timeoutMs: num(values['timeout-ms']),
    logDir: values['log-dir'],
    keep: values.keep,
    progress: values.quiet ? undefined : (/** @type {string} */ line) => console.log(line),
  };

  // Refuse a bad option before the first run, not after it.
  for (const broker of brokers) resolveOptions({ ...common, broker });

  /** @type {import('./lib/runChaos.mjs').ChaosResult[]} */
  const results = [];
  for (const broker of brokers) {
    const result = await runChaos({ ...common, broker });
    results.push(result);
    console.log(`\n${formatDetails(result)}\n`);
  }
  console.log(`chaos run of ${new Date().toISOString()}\n`);
  console.log(formatTable(results));
  console.log('\nkills: total (random / before commit / between commit and ack)');
  if (values.json) {
    const { writeFile } = await import('node:fs/promises');
    await writeFile(values.json, `${JSON.stringify(results, null, 2)}\n`);
  }
  const broken = results.filter((r) => r.lost > 0 || r.doubled > 0);
  const unfinished = results.filter((r) => !r.ok && r.lost === 0 && r.doubled === 0);
  if (broken.length > 0) {
    console.log(
      `\nFAIL: ${broken.map((r) => `${r.broker}: ${r.lost} lost, ${r.doubled} doubled`).join('; ')}`,
    );
    return 1;
  }
  const reasonOf = (/** @type {import('./lib/runChaos.mjs').ChaosResult} */ r) => {
    if (!r.drained) return 'did not drain';
    if (r.mismatched > 0) return `${r.mismatched} payment rows disagree with the provider`;
    return 'poison messages not all dead-lettered';
  };
  if (unfinished.length > 0) {
    console.log(`\nFAIL: ${unfinished.map((r) => `${r.broker}: ${reasonOf(r)}`).join('; ')}`);
    return 1;
  }
  console.log('\nOK: every order applied exactly once on every broker (lost = 0, doubled = 0).');
  return 0;
}

/** @param {string | undefined} value */
function num(value) {
  if (value === undefined) return undefined;
  const parsed = Number(value);
  if (!Number.isFinite(parsed)) throw new ChaosUsageError(`not a number: '${value}'`);
  return parsed;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    if (error instanceof ChaosUsageError) {
      console.error(error.message);
      process.exitCode = 2;
    } else {
      console.error(error);
      process.exitCode = 1;
    }
  },
);
