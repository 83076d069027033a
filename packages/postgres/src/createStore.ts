import type { StoreConfig } from '@oncely/core';
import { PostgresStore } from './PostgresStore.js';

/**
 * Builds the store for a {@link StoreConfig} (`store: { url }` in a consumer config, or
 * `ONCELY_STORE_URL=postgres://...` through `loadConfig()`): what `createConsumer` and the
 * CLI call after loading this package by the URL's scheme.
 *
 * @example
 * ```ts
 * const store = createStore({ url: 'postgres://app@db:5432/app' });
 * ```
 */
export function createStore(config: StoreConfig): PostgresStore {
  return new PostgresStore({
    connectionString: config.url,
    ...(config.schema === undefined ? {} : { schema: config.schema }),
  });
}
