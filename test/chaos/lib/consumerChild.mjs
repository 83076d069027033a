/**
 * One consumer process of a chaos run (real brokers: RabbitMQ, SQS on fauxqs, Kafka).
 * Started by the runner with its {@link import('./chaosConsumer.mjs').ConsumerPlan},
 * broker config and store config as JSON in ONCELY_CHAOS_CHILD; talks to the runner
 * over IPC:
 *
 * - runner → child: `{ type: 'arm', point }` (freeze at the next crash point),
 *   `{ type: 'disarm' }`, `{ type: 'stop' }` (graceful stop, then exit 0);
 * - child → runner: `ready`, `events` (counts), `crash-point`, `ack-dropped`, `error`.
 *
 * The runner ends it with SIGKILL: no handler, no finally block, no graceful close runs.
 */
import { loadAdapterModule } from '@oncely/core';
import { startChaosConsumer } from './chaosConsumer.mjs';
import { openChaosStore } from './chaosStore.mjs';

/**
 * @typedef {object} ChildConfig
 * @property {import('./chaosConsumer.mjs').ConsumerPlan} plan
 * @property {import('@oncely/core').BrokerConfig} brokerConfig
 * @property {{ connectionString: string, schema: string, poolMax: number }} store
 * @property {number} maxLifetimeMs
 */

/** @param {unknown} message */
function send(message) {
  if (process.connected) process.send?.(message);
}

/** @type {import('@oncely/core').Logger} */
const logger = {
  debug: () => {},
  info: () => {},
  warn: (message, fields) => console.error(`${new Date().toISOString()} warn ${message}`, brief(fields)),
  error: (message, fields) => console.error(`${new Date().toISOString()} error ${message}`, brief(fields)),
};

/** @param {Record<string, unknown> | undefined} fields */
function brief(fields) {
  if (!fields) return '';
  const error = fields.error;
  const rest = { ...fields, error: undefined };
  const text =
    error instanceof Error ? `${error.name}: ${error.message}` : error === undefined ? '' : String(error);
  return `${JSON.stringify(rest)} ${text}`;
}

async function main() {
  const raw = process.env.ONCELY_CHAOS_CHILD;
  if (!raw) throw new Error('ONCELY_CHAOS_CHILD is not set: this script is started by the chaos runner');
  /** @type {ChildConfig} */
  const config = JSON.parse(raw);
  // Never outlive the runner: a runner that dies closes the IPC channel.
  process.on('disconnect', () => process.exit(2));
  setTimeout(() => process.exit(3), config.maxLifetimeMs).unref();

  const store = openChaosStore(config.plan.store ?? 'postgres', {
    url: config.store.connectionString,
    schema: config.store.schema,
    poolMax: config.store.poolMax,
    logger,
  });
  const adapterModule = await loadAdapterModule(/** @type {any} */ (config.brokerConfig.type));
  const worker = await startChaosConsumer({
    plan: config.plan,
    store,
    adapterModule,
    brokerConfig: config.brokerConfig,
    report: send,
    // Frozen until the runner's SIGKILL arrives.
    freeze: () => new Promise(() => {}),
    logger,
  });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await worker.stop();
    await store.close().catch(() => {});
    send({ type: 'stopped' });
    // Let the IPC message flush before exiting.
    setTimeout(() => process.exit(0), 50);
  };
  process.on('message', (/** @type {{ type: string, point?: any }} */ message) => {
    if (message.type === 'arm') worker.arm(message.point);
    else if (message.type === 'disarm') worker.disarm();
    else if (message.type === 'stop') void stop();
  });
  process.on('SIGTERM', () => void stop());
  send({ type: 'ready' });
}

main().catch((error) => {
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  console.error(message);
  send({ type: 'error', message });
  setTimeout(() => process.exit(1), 100);
});
