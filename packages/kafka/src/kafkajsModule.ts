import { createRequire } from 'node:module';

let loaded: typeof import('kafkajs') | undefined;

/**
 * kafkajs, required on first use rather than imported: it is a peer dependency that a
 * user of `broker.client: 'platformatic'` need not install, and importing `@oncely/kafka`
 * must not fail without it. kafkajs is CommonJS, so `require` gives it synchronously.
 */
export function kafkajsModule(): typeof import('kafkajs') {
  if (loaded) return loaded;
  try {
    loaded = createRequire(import.meta.url)('kafkajs') as typeof import('kafkajs');
  } catch (error) {
    throw new Error(
      "this needs the kafkajs package (npm install kafkajs), or choose broker.client 'platformatic' (@platformatic/kafka)",
      { cause: error },
    );
  }
  return loaded;
}
