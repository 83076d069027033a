import type { StoreConfig } from '@oncely/core';
import { MySqlStore } from './MySqlStore.js';

/**
 * Builds the store for a {@link StoreConfig} (`store: { url }` in a consumer config, or
 * `ONCELY_STORE_URL=mysql://...` through `loadConfig()`): what `createConsumer` and the
 * CLI call after loading this package by the URL's scheme.
 *
 * @example
 * ```ts
 * const store = createStore({ url: 'mysql://app@db:3306/app', schema: 'oncely' });
 * ```
 */
export function createStore(config: StoreConfig): MySqlStore {
  return new MySqlStore({
    url: config.url,
    ...(config.schema === undefined ? {} : { schema: config.schema }),
  });
}
