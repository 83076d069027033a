import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Consumer } from './Consumer.js';
import { ADAPTER_PACKAGES, CONSUMER_DEFAULTS, labelBrokerError, validateConsumerConfig } from './config.js';
import { AdapterNotInstalledError, ConfigError } from './errors.js';
import { stderrLogger } from './logger.js';
import type { AdapterModule, BrokerConfig, BrokerType, ConsumerConfig, SqlClient } from './types.js';

/**
 * Creates a consumer for `config.broker.type`, loading the adapter package
 * (`@oncely/sqs`, `@oncely/rabbitmq`, ...) from the application by dynamic import. Fails
 * with a message naming the package to install when it is missing.
 *
 * @example
 * ```ts
 * const consumer = await createConsumer({
 *   name: 'payments',
 *   broker: { type: 'rabbitmq', url: 'amqp://localhost', queue: 'payments' },
 *   store: new PostgresStore({ connectionString: process.env.DATABASE_URL }),
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id) VALUES ($1)', [message.body.orderId]);
 *   },
 * });
 * await consumer.start();
 * ```
 */
export async function createConsumer<TBody = unknown, Tx = SqlClient>(
  config: ConsumerConfig<TBody, Tx>,
): Promise<Consumer<TBody, Tx>> {
  validateConsumerConfig(config);
  const module = await loadAdapterModule(config.broker.type as BrokerType);
  return createConsumerWith(config, module.createAdapter);
}

/**
 * Creates a consumer with a given adapter factory, no dynamic import: what each adapter
 * package's typed factory (`createSqsConsumer`, ...) calls. Validates the config first,
 * so a bad field is reported as such and not as an adapter error, and hands the adapter
 * the consumer settings it checks against the broker at start.
 *
 * @example
 * ```ts
 * import { createAdapter } from '@oncely/sqs';
 * const consumer = createConsumerWith({ name: 'payments', broker: { type: 'sqs', queueUrl }, store, handler }, createAdapter);
 * ```
 */
export function createConsumerWith<TBody = unknown, Tx = SqlClient>(
  config: ConsumerConfig<TBody, Tx>,
  createAdapter: AdapterModule['createAdapter'],
): Consumer<TBody, Tx> {
  validateConsumerConfig(config);
  let adapter: ReturnType<AdapterModule['createAdapter']>;
  try {
    adapter = createAdapter(config.broker as BrokerConfig, {
      consumerName: config.name,
      log: config.logger ?? stderrLogger,
      idStrategy: config.idStrategy,
      maxAttempts: config.maxAttempts ?? CONSUMER_DEFAULTS.maxAttempts,
      handlerTimeoutMs: config.handlerTimeoutMs ?? CONSUMER_DEFAULTS.handlerTimeoutMs,
      outageHoldMs: config.outageHoldMs ?? CONSUMER_DEFAULTS.outageHoldMs,
    });
  } catch (error) {
    // A broker option from loadConfig(): name the variable (or file) it came from.
    throw labelBrokerError(error, config.broker);
  }
  return new Consumer(config, adapter);
}

/**
 * Loads the adapter package for a broker type. Resolution starts at the application's
 * working directory (not core's own folder), so strict layouts such as pnpm's work.
 */
export async function loadAdapterModule(type: BrokerType): Promise<AdapterModule> {
  const packageName = ADAPTER_PACKAGES[type];
  if (!packageName)
    throw new ConfigError('broker.type', `must be one of ${Object.keys(ADAPTER_PACKAGES).join(', ')}`);
  let module: Partial<AdapterModule>;
  try {
    const appRequire = createRequire(join(process.cwd(), 'package.json'));
    module = await import(pathToFileURL(appRequire.resolve(packageName)).href);
  } catch (fromApp) {
    try {
      // Fallback for hoisted installs where the working directory is elsewhere.
      module = await import(packageName);
    } catch (fromCore) {
      if (isModuleNotFound(fromApp) && isModuleNotFound(fromCore)) {
        throw new AdapterNotInstalledError(type, packageName, { cause: fromCore });
      }
      throw fromCore;
    }
  }
  if (typeof module.createAdapter !== 'function') {
    throw new AdapterNotInstalledError(type, packageName, {
      cause: new Error(
        `${packageName} does not export createAdapter(); is it an Oncely adapter of a matching version?`,
      ),
    });
  }
  return module as AdapterModule;
}

function isModuleNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND';
}
