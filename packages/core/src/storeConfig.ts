import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError, OncelyError } from './errors.js';
import type { IdempotencyStore, SqlClient } from './types.js';

/**
 * A store given by configuration instead of an object: `createConsumer` loads the store
 * package the URL's scheme names (by dynamic import, from the application, like adapters)
 * and builds the store; the consumer closes it when it stops. `loadConfig()` reads it from
 * `ONCELY_STORE_URL`.
 *
 * - `postgres://`, `postgresql://` → `@oncely/postgres` (`PostgresStore`)
 * - `mysql://`, `mariadb://` → `@oncely/mysql` (`MySqlStore`)
 *
 * The store is not migrated for you: run `oncely migrate` (or the store's `migrate()`)
 * first; until then the consumer stays paused (the schema-version guard fails closed).
 *
 * @example
 * ```ts
 * const consumer = await createConsumer({ name: 'payments', broker, store: { url: 'mysql://app@db:3306/app' }, handler });
 * ```
 */
export interface StoreConfig {
  /** Where the database is; its scheme picks the store package. */
  url: string;
  /** The store's schema (MySQL: database). @default the store's own (`ONCELY_SCHEMA`, else 'oncely') */
  schema?: string;
}

/**
 * Store packages by URL scheme (without the colon).
 *
 * @example
 * ```ts
 * STORE_PACKAGES.mysql; // '@oncely/mysql'
 * ```
 */
export const STORE_PACKAGES: Readonly<Record<string, string>> = {
  postgres: '@oncely/postgres',
  postgresql: '@oncely/postgres',
  mysql: '@oncely/mysql',
  mariadb: '@oncely/mysql',
};

/**
 * What each store package exports so `createConsumer` (and the CLI) can build its store
 * from a {@link StoreConfig}.
 *
 * @example
 * ```ts
 * export const createStore: StoreModule['createStore'] = (config) => new MySqlStore({ url: config.url, schema: config.schema });
 * ```
 */
export interface StoreModule {
  createStore(config: StoreConfig): IdempotencyStore<SqlClient>;
}

/**
 * The store package for a store URL's scheme could not be loaded from the application.
 *
 * @example
 * ```ts
 * if (error instanceof StoreNotInstalledError) console.error(`npm install ${error.packageName}`);
 * ```
 */
export class StoreNotInstalledError extends OncelyError {
  constructor(
    readonly scheme: string,
    readonly packageName: string,
    options?: ErrorOptions,
  ) {
    super(
      'ADAPTER_NOT_INSTALLED',
      `a ${scheme}:// store needs the package ${packageName}: run \`npm install ${packageName}\` in your application`,
      options,
    );
  }
}

/**
 * True when `value` is a {@link StoreConfig} (an object with a `url` and no store methods).
 *
 * @example
 * ```ts
 * isStoreConfig({ url: 'mysql://db/app' }); // true
 * ```
 */
export function isStoreConfig(value: unknown): value is StoreConfig {
  return (
    typeof value === 'object' &&
    value !== null &&
    'url' in value &&
    typeof (value as { transaction?: unknown }).transaction !== 'function'
  );
}

/**
 * Builds the store a {@link StoreConfig} names: checks the URL, loads the store package
 * for its scheme from the application (a missing one fails with
 * {@link StoreNotInstalledError}) and calls its `createStore`. No connection is opened yet.
 *
 * @example
 * ```ts
 * const store = await openStore({ url: process.env.ONCELY_STORE_URL! });
 * await (store as { migrate?: () => Promise<unknown> }).migrate?.();
 * ```
 */
export async function openStore(
  config: StoreConfig,
  field = 'store.url',
): Promise<IdempotencyStore<SqlClient>> {
  const { url } = config;
  if (typeof url !== 'string' || url === '') throw new ConfigError(field, 'must be a non-empty URL');
  let scheme: string;
  try {
    scheme = new URL(url).protocol.slice(0, -1);
  } catch {
    throw new ConfigError(
      field,
      'must be a URL such as postgres://user@host:5432/db or mysql://user@host:3306/db',
    );
  }
  const packageName = STORE_PACKAGES[scheme];
  if (!packageName) {
    throw new ConfigError(
      field,
      `has the scheme ${scheme}://; known: ${Object.keys(STORE_PACKAGES).join(', ')}`,
    );
  }
  let module: Partial<StoreModule>;
  try {
    module = await importFromApplication(packageName);
  } catch (error) {
    if (isModuleNotFound(error)) throw new StoreNotInstalledError(scheme, packageName, { cause: error });
    throw error;
  }
  if (typeof module.createStore !== 'function') {
    throw new StoreNotInstalledError(scheme, packageName, {
      cause: new Error(
        `${packageName} does not export createStore(); is it an Oncely store of a matching version?`,
      ),
    });
  }
  return module.createStore({ url, ...(config.schema === undefined ? {} : { schema: config.schema }) });
}

/**
 * Imports a package the way the application would resolve it (from its working directory,
 * so strict layouts such as pnpm's work), falling back to core's own resolution for
 * hoisted installs. Rejects with the error of the fallback.
 */
export async function importFromApplication<T>(packageName: string): Promise<T> {
  try {
    const appRequire = createRequire(join(process.cwd(), 'package.json'));
    return await import(pathToFileURL(appRequire.resolve(packageName)).href);
  } catch (fromApp) {
    try {
      return await import(packageName);
    } catch (fromCore) {
      if (isModuleNotFound(fromApp) && isModuleNotFound(fromCore)) throw fromCore;
      throw isModuleNotFound(fromCore) ? fromApp : fromCore;
    }
  }
}

export function isModuleNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND';
}
