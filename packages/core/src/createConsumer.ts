import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Consumer } from './Consumer.js';
import { ADAPTER_PACKAGES, CONSUMER_DEFAULTS, validateConsumerConfig } from './config.js';
import { AdapterNotInstalledError, ConfigError } from './errors.js';
import { labelBrokerError } from './loadConfig.js';
import { stderrLogger } from './logger.js';
import { isStoreConfig, openStore, type StoreConfig } from './storeConfig.js';
import type {
  AdapterModule,
  BrokerAdapter,
  BrokerConfig,
  BrokerType,
  ConsumerConfig,
  IdempotencyStore,
  SqlClient,
} from './types.js';

/**
 * What {@link createConsumer} takes: a {@link ConsumerConfig} whose `store` may also be a
 * {@link StoreConfig} (`{ url }`, as `loadConfig()` reads it from `ONCELY_STORE_URL`).
 *
 * @example
 * ```ts
 * const options: ConsumerOptions = { ...loadConfig(), handler }; // ONCELY_STORE_URL=mysql://app@db:3306/app
 * ```
 */
export type ConsumerOptions<TBody = unknown, Tx = SqlClient> = Omit<ConsumerConfig<TBody, Tx>, 'store'> & {
  store?: IdempotencyStore<Tx> | StoreConfig;
};

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
  config: ConsumerOptions<TBody, Tx>,
): Promise<Consumer<TBody, Tx>> {
  if (!isStoreConfig(config.store)) {
    const given = config as ConsumerConfig<TBody, Tx>;
    validateConsumerConfig(given);
    const module = await loadAdapterModule(given.broker.type as BrokerType);
    return createConsumerWith(given, module.createAdapter);
  }
  // A store by configuration: built here (no connection yet), owned by the consumer, and
  // closed after its adapter closes (stop, or a start that failed).
  const store = (await openStore(config.store)) as unknown as IdempotencyStore<Tx>;
  try {
    const resolved = { ...config, store } as ConsumerConfig<TBody, Tx>;
    validateConsumerConfig(resolved);
    const module = await loadAdapterModule(resolved.broker.type as BrokerType);
    return createConsumerWith(resolved, (broker, options) =>
      closingStore(module.createAdapter(broker, options), store),
    );
  } catch (error) {
    await store.close().catch(() => {});
    throw error;
  }
}

/** The adapter, whose close() also closes the store the consumer built from its config. */
function closingStore(adapter: BrokerAdapter, store: IdempotencyStore<any>): BrokerAdapter {
  const close = adapter.close.bind(adapter);
  adapter.close = async () => {
    try {
      await close();
    } finally {
      await store.close();
    }
  };
  return adapter;
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
