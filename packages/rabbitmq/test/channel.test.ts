import { isOncelyError, type Logger, silentLogger } from '@oncely/core';
import { ChannelClosedError, parseBrokerOptions, RabbitMqAdapter } from '@oncely/rabbitmq';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  closeConnectionsServerSide,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  recordingRuntime,
  servicesAvailable,
  unique,
  waitFor,
} from './helpers.js';

// Adapter-level tests: the adapter against the real broker, with a recording stand-in for
// the core, so each test can hold deliveries and settle them when and how it wants.
const available = await servicesAvailable();

describe.skipIf(!available)('RabbitMqAdapter channels (real RabbitMQ)', () => {
  let raw: RawBroker;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    raw = await rawBroker();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await raw?.close();
  });

  function adapterFor(queue: string, connectionName: string, extra: Record<string, unknown> = {}) {
    const adapter = new RabbitMqAdapter(
      parseBrokerOptions({
        type: 'rabbitmq',
        url: RABBITMQ_URL,
        queue,
        connectionName,
        reconnect: { initialMs: 50, maxMs: 500 },
        ...extra,
      }),
      { consumerName: 'adapter-test', log: silentLogger },
    );
    cleanups.push(async () => {
      await adapter.close();
      await deleteTopology(raw, queue);
    });
    return adapter;
  }

  // Must catch: settling by delivery tag on whatever channel is current. Tags restart at
  // 1 on a new channel, so the stale ack of X (tag 1, channel 1) would ack Y (tag 1,
  // channel 2), a message nobody processed. Verified by swapping DeliveryChannel.settle
  // for an ack on the adapter's current channel: Y disappears and the test fails.
  it('a settle through a stale channel rejects and never acks the message holding the same tag on the new channel', async () => {
    const queue = unique('stale');
    const name = unique('oncely-test-stale');
    const adapter = adapterFor(queue, name, { prefetch: 1 });
    const runtime = recordingRuntime(1);
    await adapter.start(runtime);
    await raw.publish(queue, [{ id: 'X' }]);
    await waitFor(() => runtime.deliveries.length === 1, 'delivery of X');
    const stale = runtime.deliveries[0]!;
    expect(stale.envelope.producerMessageId).toBe('X');
    expect((stale.envelope.raw as { fields: { deliveryTag: number } }).fields.deliveryTag).toBe(1);

    // Stop consuming (X stays unacked on channel 1), then cut the connection from the
    // server side: the broker requeues X, the adapter reconnects on channel generation 2.
    await adapter.pause();
    expect(await closeConnectionsServerSide(name)).toBe(1);
    await waitFor(() => adapter.channelGeneration === 2, 'the adapter to reconnect');

    // Someone else takes X; Y is the next message and gets tag 1 on the new channel.
    const taken = await raw.drain(queue);
    expect(taken.map((m) => m.properties.messageId)).toEqual(['X']);
    await raw.publish(queue, [{ id: 'Y' }]);
    await adapter.resume();
    await waitFor(() => runtime.deliveries.length === 2, 'delivery of Y');
    const fresh = runtime.deliveries[1]!;
    expect(fresh.envelope.producerMessageId).toBe('Y');
    expect((fresh.envelope.raw as { fields: { deliveryTag: number } }).fields.deliveryTag).toBe(1);

    const ackError = await stale.ack().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(ackError).toBeInstanceOf(ChannelClosedError);
    expect(isOncelyError(ackError, 'LEASE_LOST')).toBe(true);
    expect(stale.lost?.aborted).toBe(true);
    expect(stale.lost?.reason).toBeInstanceOf(ChannelClosedError);
    expect(fresh.lost?.aborted).toBe(false);

    // Y was not acked by the stale settle: closing the adapter returns it to the queue.
    await adapter.close();
    await waitFor(async () => (await raw.ready(queue)) === 1, 'Y back in the queue');
    const left = await raw.drain(queue);
    expect(left.map((m) => m.properties.messageId)).toEqual(['Y']);
  });

  it('reconnects after a server-side disconnect and consumes again; every settle of the old channel rejects', async () => {
    const queue = unique('reconnect');
    const name = unique('oncely-test-reconnect');
    const adapter = adapterFor(queue, name, { prefetch: 5 });
    const runtime = recordingRuntime(5);
    await adapter.start(runtime);
    await raw.publish(queue, [{ id: 'a' }, { id: 'b' }, { id: 'c' }]);
    await waitFor(() => runtime.deliveries.length === 3, 'first three deliveries');
    const old = runtime.deliveries.slice();
    expect(old.every((d) => d.envelope.redelivered === false)).toBe(true);

    await closeConnectionsServerSide(name);
    await waitFor(() => runtime.deliveries.length === 6, 'the three redeliveries', 20_000);
    const again = runtime.deliveries.slice(3);
    expect(again.map((d) => d.envelope.producerMessageId).sort()).toEqual(['a', 'b', 'c']);
    expect(again.every((d) => d.envelope.redelivered === true)).toBe(true);
    expect(adapter.channelGeneration).toBe(2);
    expect(runtime.errors.some((e) => e.context.includes('connection lost'))).toBe(true);

    await expect(old[0]!.ack()).rejects.toBeInstanceOf(ChannelClosedError);
    await expect(old[1]!.release()).rejects.toBeInstanceOf(ChannelClosedError);
    await expect(old[2]!.retryLater(0)).rejects.toBeInstanceOf(ChannelClosedError);
    for (const delivery of again) await delivery.ack();
    await adapter.close();
    expect(await raw.ready(queue)).toBe(0);
  });

  // Issue 11, RabbitMQ 1: after a reconnect the adapter waited for a free slot and then
  // consumed outside the pause/resume/stop serialization, so a resume() during that wait
  // consumed first and the wait consumed again: two consumers on one channel, and stop()
  // cancelled only the last one, leaving the other taking (and, on a quorum queue with a
  // delivery limit, dead-lettering) messages during the stop drain.
  it('a pause/resume while a reconnected channel waits for a slot leaves one consumer, and stop() leaves none', async () => {
    const queue = unique('onecons');
    const name = unique('oncely-test-onecons');
    const adapter = adapterFor(queue, name, { prefetch: 1 });
    // The adapter logs 'RabbitMQ consumer recovered' once the reconnected channel's setup,
    // its basic.consume included, has returned: after that no consume of this recovery is
    // still on the wire, so the count below is final (it was a 500 ms pause).
    let recoveries = 0;
    const log: Logger = {
      ...silentLogger,
      info: (message: string) => {
        if (message === 'RabbitMQ consumer recovered') recoveries++;
      },
    };
    const runtime = { ...recordingRuntime(1), log };
    // Slots are "full" while `gate` is closed: the reconnected channel must wait.
    let gate: { promise: Promise<void>; open(): void } | undefined;
    let waiting = 0;
    runtime.whenReady = async () => {
      if (gate) {
        waiting++;
        await gate.promise;
      }
      return 1;
    };
    await adapter.start(runtime);
    const consumers = async () => {
      const ch = await raw.freshChannel();
      try {
        return (await ch.checkQueue(queue)).consumerCount;
      } finally {
        await ch.close().catch(() => {});
      }
    };
    expect(await consumers()).toBe(1);

    let open!: () => void;
    gate = { promise: new Promise<void>((resolve) => (open = resolve)), open: () => open() };
    expect(await closeConnectionsServerSide(name)).toBe(1);
    await waitFor(() => waiting > 0, 'the reconnected channel to wait for a slot', 20_000);
    // The core pauses and resumes (a store outage and its end) while the channel waits.
    await adapter.pause();
    await adapter.resume();
    gate.open();
    gate = undefined;
    await waitFor(() => recoveries === 1, 'the reconnected channel set up (its consume returned)', 20_000);
    expect(await consumers()).toBe(1);

    // stop() returns once the broker confirmed its basic.cancel (cancel-ok), so a consumer
    // it knew of is gone now; one it did not know of stays, and the count is not 0.
    await adapter.stop();
    expect(await consumers()).toBe(0);
  });

  it('re-creates the consumer after the broker cancels it (queue deleted and declared again)', async () => {
    const queue = unique('cancel');
    const adapter = adapterFor(queue, unique('oncely-test-cancel'));
    const runtime = recordingRuntime(2);
    await adapter.start(runtime);
    await raw.deleteQueues(queue);
    await waitFor(() => runtime.errors.some((e) => e.context.includes('cancelled')), 'the broker cancel');
    // The adapter keeps retrying; once the queue is back (any declare), it consumes again.
    const ch = await raw.freshChannel();
    await ch.assertQueue(queue, {
      durable: true,
      arguments: {
        'x-queue-type': 'classic',
        'x-dead-letter-exchange': `${queue}.dlx`,
        'x-dead-letter-routing-key': queue,
      },
    });
    await ch.close();
    await raw.publish(queue, [{ id: 'after-cancel' }]);
    await waitFor(() => runtime.deliveries.length === 1, 'a delivery after the re-created consumer', 20_000);
    await runtime.deliveries[0]!.ack();
  });

  // Issue 11, RabbitMQ 4: the topology was declared again only after a lost connection;
  // after the broker cancelled the consumer because its queue was deleted, the adapter
  // re-created the channel and failed to consume (404) forever.
  it('a deleted queue is declared again on recovery (assertQueue) and consumed', async () => {
    const queue = unique('redeclare');
    const adapter = adapterFor(queue, unique('oncely-test-redeclare'));
    const runtime = recordingRuntime(2);
    await adapter.start(runtime);
    await raw.deleteQueues(queue);
    await waitFor(() => runtime.errors.some((e) => e.context.includes('cancelled')), 'the broker cancel');
    const exists = async () => {
      const ch = await raw.freshChannel();
      try {
        await ch.checkQueue(queue);
        return true;
      } catch {
        return false;
      } finally {
        await ch.close().catch(() => {});
      }
    };
    await waitFor(exists, 'the adapter to declare the queue again', 20_000);
    await raw.publish(queue, [{ id: 'after-delete' }]);
    await waitFor(() => runtime.deliveries.length === 1, 'a delivery from the re-declared queue', 20_000);
    await runtime.deliveries[0]!.ack();
  });

  it('a second settle of the same delivery is refused instead of closing the channel', async () => {
    const queue = unique('double');
    const adapter = adapterFor(queue, unique('oncely-test-double'));
    const runtime = recordingRuntime(2);
    await adapter.start(runtime);
    await raw.publish(queue, [{ id: 'once' }, { id: 'twice' }]);
    await waitFor(() => runtime.deliveries.length === 2, 'two deliveries');
    const [first, second] = runtime.deliveries as [
      (typeof runtime.deliveries)[0],
      (typeof runtime.deliveries)[0],
    ];
    await first.ack();
    await expect(first.ack()).rejects.toThrow(/already settled/);
    // The channel survived (a real double ack would be a 406 channel error): the second
    // delivery still settles on it.
    await second.ack();
    expect(adapter.channelGeneration).toBe(1);
    await adapter.close();
    expect(await raw.ready(queue)).toBe(0);
  });
});
