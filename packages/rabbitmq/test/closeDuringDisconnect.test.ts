import { silentLogger } from '@oncely/core';
import { createRabbitMqConsumer, openDeadLetters } from '@oncely/rabbitmq';
import { TcpProxy } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestStore,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// A close that meets the connection's end must still finish. amqplib's channel.close()
// and connection.close() resolve on the broker's close-ok only: when the connection dies
// after the close frame went out (the broker restarted, a server-side close, a network cut),
// no close-ok ever comes and the promise never settles. `oncely dlq replay` hung for good
// that way when the broker closed its connection as the pass was closing (CI, 400 s
// timeout), and a consumer's stop() can meet the same end.
const available = await servicesAvailable();

/** Resolves with what `promise` gave, or with 'hung' after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'hung'> {
  return Promise.race([promise, new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), ms))]);
}

/** The prototype on `object`'s chain that defines `method`. */
function ownerOf(object: object, method: string): Record<string, unknown> {
  for (let proto = Object.getPrototypeOf(object); proto; proto = Object.getPrototypeOf(proto)) {
    if (Object.hasOwn(proto, method)) return proto;
  }
  throw new Error(`no ${method} on the prototype chain`);
}

describe.skipIf(!available)('closing while the connection dies (real RabbitMQ through a proxy)', () => {
  let raw: RawBroker;
  let db: TestStore;
  let proxy: TcpProxy;
  let proxiedUrl: string;
  const queues: string[] = [];

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
    const target = new URL(RABBITMQ_URL);
    proxy = new TcpProxy({ host: target.hostname, port: Number(target.port || 5672) });
    const port = await proxy.start();
    const proxied = new URL(RABBITMQ_URL);
    proxied.port = String(port);
    proxiedUrl = proxied.toString();
  });
  afterEach(async () => {
    for (const queue of queues.splice(0)) await deleteTopology(raw, queue);
  });
  afterAll(async () => {
    await proxy?.close();
    await db?.cleanup();
    await raw?.close();
  });

  it('a dead-letter pass whose connection drops as it closes: close() settles, every letter is back', async () => {
    const queue = unique('dlqclose');
    queues.push(queue);
    const ch = await raw.freshChannel();
    await ch.assertQueue(queue, { durable: true });
    await ch.assertQueue(`${queue}.dlq`, { durable: true });
    await ch.close();
    await raw.publish(
      `${queue}.dlq`,
      Array.from({ length: 5 }, (_, i) => ({ id: `${queue}-${i}`, body: { i } })),
    );
    const session = await openDeadLetters({
      name: `c-${queue}`,
      broker: { type: 'rabbitmq', url: proxiedUrl, queue },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    expect(await session.read()).toHaveLength(5);
    const closing = session.close(); // the nack and the channel close are on their way
    expect(proxy.disconnect()).toBe(1); // before any close-ok can come back
    expect(await within(closing, 20_000)).toBeUndefined();
    // The broker requeues what the dead connection held.
    await waitFor(async () => (await raw.ready(`${queue}.dlq`)) === 5, 'all 5 back in the DLQ', 60_000);
  }, 90_000);

  it("a consumer's stop() whose connection drops as it closes the channel: stop() settles", async () => {
    const queue = unique('stopclose');
    queues.push(queue);
    const consumer = createRabbitMqConsumer<{ i: number }>({
      name: `c-${queue}`,
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
      broker: { url: proxiedUrl, queue, reconnect: { initialMs: 50, maxMs: 1000 } },
    });
    await consumer.start();
    await waitFor(async () => proxy.connectionCount === 1, 'the consumer connected', 30_000);
    // The fault at the one moment that matters: the real client's channel close has put its
    // frame on the wire, and the connection drops before the broker's close-ok is back.
    // amqplib does not export its channel class: reach it through a channel of ours.
    const channelClass = ownerOf(raw.channel, 'close');
    const close = channelClass.close as (this: unknown) => Promise<void>;
    let cut = 0;
    channelClass.close = function (this: unknown) {
      const closing = close.call(this);
      cut += proxy.disconnect();
      return closing;
    };
    try {
      expect(await within(consumer.stop(), 20_000)).toBeUndefined();
    } finally {
      channelClass.close = close;
    }
    expect(cut).toBe(1);
  }, 60_000);
});
