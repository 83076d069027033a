/**
 * relay.stop() must end when PostgreSQL goes silent (a black-holing network: no error, no
 * close, no answer). It releases its LISTEN connection with an UNLISTEN, which was sent on
 * the raw client, outside the store's queryTimeoutMs: with no answer, stop() waited for
 * TCP keepalive (hours).
 */
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { TcpProxy } from '@oncely/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';
import { cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

const { schemas, stores } = cleanupAfterFile();

/** Resolves with what `promise` gave, or with 'hung' after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), ms);
  });
  return Promise.race([promise, hung]).finally(() => clearTimeout(timer));
}

const nothingSent: OutboxProducer = {
  async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
    return messages.map(() => ({ ok: true }));
  },
};

describe.skipIf(!hasPostgres)('relay.stop() with PostgreSQL silent (through a stalled proxy)', () => {
  const proxy = new TcpProxy({ host: '127.0.0.1', port: Number(new URL(connectionString).port || 5432) });
  afterAll(() => proxy.close());

  it('stop() settles, the UNLISTEN bounded by queryTimeoutMs', async () => {
    const schema = uniqueSchema('relay_stall');
    schemas.push(schema);
    const direct = new PostgresStore({ connectionString, schema });
    stores.push(direct);
    await direct.migrate();
    const proxied = new URL(connectionString);
    proxied.port = String(await proxy.start());
    const store = new PostgresStore({
      connectionString: proxied.toString(),
      schema,
      queryTimeoutMs: 2_000,
      connectTimeoutMs: 2_000,
    });
    stores.push(store);
    const relay = createRelay({ store, producers: nothingSent, pollIntervalMs: 60_000 });
    await relay.start(); // LISTEN is on: the loop now sleeps until a notification or the poll
    proxy.stall();
    expect(await within(relay.stop(), 30_000)).toBeUndefined();
  }, 60_000);
});
