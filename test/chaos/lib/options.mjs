/**
 * Options of one chaos run, their defaults and their validation. Shared by the CLI
 * (run.mjs) and the vitest file (chaos.test.ts).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Brokers that have an adapter in this repository (Kafka only once its package is built). */
export const LANDED_BROKERS = /** @type {const} */ ([
  'memory',
  'rabbitmq',
  'sqs',
  'kafka',
  'pubsub',
  'servicebus',
]);

/** Brokers the design names but that have no adapter yet: refused with a clear message. */
export const PLANNED_BROKERS = /** @type {const} */ ([]);

/** Consumer defects that must make the check fail (proof that it can). */
export const DEFECTS = /** @type {const} */ ([
  'ack-before-commit',
  'marker-separate-commit',
  'no-idempotency-key',
]);

const kafkaDist = fileURLToPath(new URL('../../../packages/kafka/dist/index.js', import.meta.url));

/** A wrong command line or an unsupported broker: exit code 2, no stack trace. */
export class ChaosUsageError extends Error {
  name = 'ChaosUsageError';
}

/**
 * @typedef {object} ChaosOptions
 * @property {string} broker memory | rabbitmq | sqs | kafka
 * @property {number} messages distinct orders (unique message IDs)
 * @property {number} consumers consumer processes running at once
 * @property {number} kills SIGKILLs to deliver while messages flow (a third at each crash point)
 * @property {number} concurrency handlers in flight per consumer
 * @property {number} seed seeds the orders, the producer's duplicates and every fault decision
 * @property {number} duplicateShare share of orders the producer publishes 2–3 times
 * @property {number} poison messages without an ID plus messages with an unparseable body
 * @property {number} ackLoss share of acks lost after the commit
 * @property {number} stallRate share of handlers that stall longer than the broker lease
 * @property {boolean} dbCut cut the database (TCP proxy) once mid-run
 * @property {number} dbCutMs how long the database stays cut
 * @property {boolean} brokerDrop drop the consumers' broker connections twice mid-run
 * @property {boolean} brokerRestart restart the broker mid-run where it is ours (Kafka, fauxqs)
 * @property {'kafkajs' | 'platformatic'} kafkaClient the Kafka consumers' `broker.client` (Kafka only)
 * @property {string | undefined} childNode the Node binary of the consumer child processes (default: the runner's)
 * @property {'postgres' | 'mysql'} store the store: `@oncely/postgres` (default) or `@oncely/mysql` (MYSQL_URL)
 * @property {boolean} pgRestart `pg_ctlcluster 15 main restart` mid-run (or the cluster ONCELY_PG_CLUSTER names)
 * @property {string | undefined} defect a deliberately broken consumer
 * @property {number} timeoutMs give up waiting for the queues to drain after this long
 * @property {string | undefined} logDir where consumer logs go (default: a temp dir)
 * @property {boolean} keep keep the database schema even when the run passes
 * @property {(line: string) => void} [progress] progress lines (the CLI prints them)
 */

/** @returns {Omit<ChaosOptions, 'broker'>} */
export function defaultOptions() {
  return {
    messages: 1000,
    consumers: 3,
    kills: 6,
    concurrency: 6,
    seed: 42,
    duplicateShare: 0.1,
    poison: 4,
    ackLoss: 0.02,
    stallRate: 0.003,
    dbCut: true,
    dbCutMs: 3000,
    brokerDrop: true,
    brokerRestart: true,
    pgRestart: false,
    store: 'postgres',
    kafkaClient: 'kafkajs',
    childNode: process.env.ONCELY_CHAOS_CHILD_NODE || undefined,
    defect: undefined,
    timeoutMs: 0,
    logDir: undefined,
    keep: false,
  };
}

/**
 * Fills in defaults and refuses what cannot run. Throws {@link ChaosUsageError}.
 *
 * @param {Partial<ChaosOptions> & { broker: string }} input
 * @returns {ChaosOptions}
 */
export function resolveOptions(input) {
  const options = { ...defaultOptions(), ...stripUndefined(input) };
  checkBroker(options.broker);
  integer(options.messages, 'messages', 1);
  integer(options.consumers, 'consumers', 1);
  integer(options.kills, 'kills', 0);
  integer(options.concurrency, 'concurrency', 1);
  integer(options.seed, 'seed', 0);
  integer(options.poison, 'poison', 0);
  integer(options.dbCutMs, 'db-cut-ms', 0);
  rate(options.duplicateShare, 'duplicates');
  if (options.store !== 'postgres' && options.store !== 'mysql') {
    throw new ChaosUsageError(`--store must be postgres or mysql, got '${options.store}'`);
  }
  if (options.pgRestart && options.store === 'mysql') {
    throw new ChaosUsageError('--pg-restart restarts PostgreSQL; it has no meaning with --store mysql');
  }
  if (options.kafkaClient !== 'kafkajs' && options.kafkaClient !== 'platformatic') {
    throw new ChaosUsageError(`--kafka-client must be kafkajs or platformatic, got '${options.kafkaClient}'`);
  }
  if (options.broker === 'kafka' && options.kafkaClient === 'platformatic') {
    checkPlatformaticNode(options.childNode ?? process.execPath);
  }
  rate(options.ackLoss, 'ack-loss');
  rate(options.stallRate, 'stall');
  if (options.defect !== undefined && !DEFECTS.includes(/** @type {any} */ (options.defect))) {
    throw new ChaosUsageError(`--defect must be one of ${DEFECTS.join(', ')}, got '${options.defect}'`);
  }
  // ONCELY_PG_CLUSTER names a cluster the caller owns (the test command's serial group
  // creates one for this run alone): restarting it breaks nobody, in CI or not.
  if (options.pgRestart && process.env.CI === 'true' && !process.env.ONCELY_PG_CLUSTER) {
    throw new ChaosUsageError(
      '--pg-restart restarts the shared PostgreSQL server (pg_ctlcluster 15 main restart) and breaks whatever else ' +
        "uses it: under CI=true it is refused unless ONCELY_PG_CLUSTER names a cluster of the run's own",
    );
  }
  if (!options.timeoutMs) options.timeoutMs = 120_000 + 40 * options.messages + 8000 * options.kills;
  return options;
}

/** @param {string} broker */
export function checkBroker(broker) {
  if (PLANNED_BROKERS.includes(/** @type {any} */ (broker))) {
    throw new ChaosUsageError(
      `--broker ${broker}: there is no @oncely/${broker} adapter yet, so there is nothing to run chaos against ` +
        `(landed: ${landedBrokers().join(', ')})`,
    );
  }
  if (!LANDED_BROKERS.includes(/** @type {any} */ (broker))) {
    throw new ChaosUsageError(
      `--broker must be one of ${[...LANDED_BROKERS, ...PLANNED_BROKERS].join(', ')}, got '${broker}'`,
    );
  }
  if (broker === 'kafka' && !kafkaBuilt()) {
    throw new ChaosUsageError(
      '--broker kafka: packages/kafka/dist does not exist; build the adapter first (npx tsc -b packages/kafka)',
    );
  }
}

/**
 * @platformatic/kafka runs on Node >= 22.22 (the adapter refuses older ones with a
 * ConfigError): the consumer processes must be started with such a Node. Refused here,
 * before anything starts, instead of every consumer failing its start.
 *
 * @param {string} node the binary the consumer processes are started with
 */
export function checkPlatformaticNode(node) {
  const probe = spawnSync(node, ['-p', 'process.versions.node'], { encoding: 'utf8' });
  const version = probe.status === 0 ? probe.stdout.trim() : undefined;
  const [major = 0, minor = 0] = (version ?? '0.0').split('.').map(Number);
  if (major > 22 || (major === 22 && minor >= 22)) return;
  throw new ChaosUsageError(
    `--kafka-client platformatic: @platformatic/kafka needs Node >= 22.22, and the consumer processes would run on ` +
      `${version === undefined ? `'${node}', which did not answer` : `Node ${version} (${node})`}. Run the harness on ` +
      `Node 22 (npx -y -p node@22 -c 'node test/chaos/run.mjs ...') or give a Node 22 binary with --child-node ` +
      '(or ONCELY_CHAOS_CHILD_NODE)',
  );
}

/** True when the Kafka adapter has been built. */
export function kafkaBuilt() {
  return existsSync(kafkaDist);
}

/** Brokers that can run here now. */
export function landedBrokers() {
  return LANDED_BROKERS.filter((broker) => broker !== 'kafka' || kafkaBuilt());
}

/** @param {Record<string, unknown>} input */
function stripUndefined(input) {
  return Object.fromEntries(Object.entries(input).filter(([, value]) => value !== undefined));
}

/** @param {unknown} value @param {string} name @param {number} min */
function integer(value, name, min) {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new ChaosUsageError(`--${name} must be an integer >= ${min}, got '${value}'`);
  }
}

/** @param {unknown} value @param {string} name */
function rate(value, name) {
  if (typeof value !== 'number' || !(value >= 0 && value < 1)) {
    throw new ChaosUsageError(`--${name} must be a number from 0 to below 1, got '${value}'`);
  }
}
