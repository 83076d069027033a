import { ConfigError } from '@oncely/core';
import {
  ATTEMPTS_HEADER,
  type CountingRules,
  consumerTimeoutFindings,
  delayQueueOptions,
  parseBrokerOptions,
  parseTopology,
  retryDelayBucket,
  stringifyHeaders,
  toEnvelope,
  workQueueOptions,
} from '@oncely/rabbitmq';
import type { ConsumeMessage } from 'amqplib';
import { describe, expect, it } from 'vitest';

// Pure functions only: option parsing, the delay ladder, header mapping and delivery
// counting, the consumer-timeout budget. Broker behaviour is in the integration files.

const url = 'amqp://guest:guest@127.0.0.1:5672';

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('parseBrokerOptions', () => {
  it('fills in defaults', () => {
    const options = parseBrokerOptions({ type: 'rabbitmq', url, queue: 'payments' });
    expect(options).toMatchObject({
      queue: 'payments',
      queueType: 'classic',
      retry: 'topology',
      assertQueue: true,
      prefetch: undefined,
      deadLetterExchange: 'payments.dlx',
      deadLetterQueue: 'payments.dlq',
      deadLetterRoutingKey: 'payments',
      confirmTimeoutMs: 30_000,
      reconnectInitialMs: 100,
      reconnectMaxMs: 30_000,
    });
  });

  it.each([
    [{ url: 'http://x', queue: 'q' }, 'broker.url'],
    [{ url, queue: '' }, 'broker.queue'],
    [{ url, queue: 'amq.mine' }, 'broker.queue'],
    [{ url, queue: 'q', prefetch: 0 }, 'broker.prefetch'],
    [{ url, queue: 'q', prefetch: 1.5 }, 'broker.prefetch'],
    [{ url, queue: 'q', retry: 'later' }, 'broker.retry'],
    [{ url, queue: 'q', queueType: 'stream' }, 'broker.queueType'],
    [{ url, queue: 'q', deliveryLimit: 10 }, 'broker.deliveryLimit'],
    [{ url, queue: 'q', consumerTimeoutMs: -1 }, 'broker.consumerTimeoutMs'],
    [{ url, queue: 'q', assertQueue: false }, 'broker.retryDelaysMs'],
    [{ url, queue: 'q', retryDelaysMs: [] }, 'broker.retryDelaysMs'],
    [{ url, queue: 'q', retryDelaysMs: [1000, 0] }, 'broker.retryDelaysMs[1]'],
    [{ url, queue: 'q', reconnect: { initialMs: 500, maxMs: 100 } }, 'broker.reconnect.maxMs'],
    [{ url, queue: 'q', prefech: 5 }, 'broker.prefech'],
    [{ type: 'sqs', url, queue: 'q' }, 'broker.type'],
    [{ url: [], queue: 'q' }, 'broker.url'],
    [{ url: [url, 'http://x'], queue: 'q' }, 'broker.url'],
    [{ url, queue: 'q', singleActiveConsumer: 'yes' }, 'broker.singleActiveConsumer'],
    [{ url, queue: 'q', bindings: [{ routingKey: 'a' }] }, 'broker.bindings[0].exchange'],
    [{ url, queue: 'q', bindings: [{ exchange: 'e', type: 'x-delayed' }] }, 'broker.bindings[0].type'],
    [{ url, queue: 'q', consumerPriority: 1.5 }, 'broker.consumerPriority'],
    [{ url, queue: 'q', consumeArguments: [] }, 'broker.consumeArguments'],
  ])('rejects %j naming %s', (broker, field) => {
    expect(configError(() => parseBrokerOptions(broker as Record<string, unknown>)).field).toBe(field);
  });

  it('accepts assertQueue: false with requeue retries or fixed delays', () => {
    expect(parseBrokerOptions({ url, queue: 'q', assertQueue: false, retry: 'requeue' }).assertQueue).toBe(
      false,
    );
    expect(
      parseBrokerOptions({ url, queue: 'q', assertQueue: false, retryDelaysMs: [5000, 1000, 1000] })
        .retryDelaysMs,
    ).toEqual([1000, 5000]);
  });

  it('never shows the password of a bad URL', () => {
    const error = configError(() => parseBrokerOptions({ url: 'ftp://user:secret@host', queue: 'q' }));
    expect(error.message).not.toContain('secret');
  });
});

describe('topology', () => {
  it('declares the work queue with the dead-letter exchange and, for quorum queues, the delivery limit', () => {
    const topology = parseTopology({ queue: 'orders', queueType: 'quorum', deliveryLimit: 50 });
    expect(workQueueOptions(topology)).toEqual({
      durable: true,
      arguments: {
        'x-queue-type': 'quorum',
        'x-dead-letter-exchange': 'orders.dlx',
        'x-dead-letter-routing-key': 'orders',
        'x-delivery-limit': 50,
      },
    });
  });

  it('delay queues dead-letter back to the work queue; quorum ones at least once; on-demand ones expire', () => {
    const classic = delayQueueOptions(parseTopology({ queue: 'orders' }), 1200);
    expect(classic.arguments).toMatchObject({
      'x-message-ttl': 1200,
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': 'orders',
    });
    expect(classic.arguments['x-expires']).toBeGreaterThan(1200);
    const fixed = delayQueueOptions(
      parseTopology({ queue: 'orders', queueType: 'quorum', retryDelaysMs: [1000] }),
      1000,
    );
    expect(fixed.arguments).toMatchObject({
      'x-queue-type': 'quorum',
      'x-dead-letter-strategy': 'at-least-once',
      'x-overflow': 'reject-publish',
    });
    expect(fixed.arguments['x-expires']).toBeUndefined();
  });

  it('rounds delays up, never down', () => {
    expect(retryDelayBucket(0, undefined)).toBe(0);
    expect(retryDelayBucket(-5, undefined)).toBe(0);
    expect(retryDelayBucket(1, undefined)).toBe(10);
    expect(retryDelayBucket(200, undefined)).toBe(200);
    expect(retryDelayBucket(201, undefined)).toBe(250);
    expect(retryDelayBucket(1100, undefined)).toBe(1200);
    expect(retryDelayBucket(61_000, undefined)).toBe(80_000);
    for (let delay = 1; delay < 5_000_000; delay = Math.ceil(delay * 1.07)) {
      const bucket = retryDelayBucket(delay, undefined);
      expect(bucket).toBeGreaterThanOrEqual(delay);
      expect(bucket).toBeLessThanOrEqual(Math.max(10, delay * 1.34));
    }
    expect(retryDelayBucket(1100, [1000, 5000])).toBe(5000);
    expect(retryDelayBucket(900, [1000, 5000])).toBe(1000);
    expect(retryDelayBucket(60_000, [1000, 5000])).toBe(5000);
  });
});

describe('envelope', () => {
  function message(
    headers: Record<string, unknown>,
    redelivered = false,
    messageId?: string,
  ): ConsumeMessage {
    return {
      content: Buffer.from('{}'),
      fields: { deliveryTag: 1, redelivered, exchange: '', routingKey: 'q', consumerTag: 'c' },
      properties: { headers, messageId } as ConsumeMessage['properties'],
    };
  }
  const classic: CountingRules = { queue: 'q', queueType: 'classic', retry: 'topology' };
  const quorum: CountingRules = { queue: 'q', queueType: 'quorum', retry: 'topology' };

  it('maps messageId and headers', () => {
    const envelope = toEnvelope(
      message({ 'x-order': 'o-1', n: 5, flag: true, raw: Buffer.from('bytes') }, false, 'm-1'),
      classic,
    );
    expect(envelope.producerMessageId).toBe('m-1');
    expect(envelope.brokerMessageId).toBeUndefined();
    expect(envelope.attributes).toEqual({ 'x-order': 'o-1', n: '5', flag: 'true', raw: 'bytes' });
    expect(envelope.source).toBe('q');
    expect(toEnvelope(message({}, false, ''), classic).producerMessageId).toBeUndefined();
  });

  it('counts attempts: quorum from x-delivery-count plus the copy header; classic from the header until a redelivery', () => {
    expect(toEnvelope(message({}), classic).deliveryCount).toBe(1);
    expect(toEnvelope(message({ [ATTEMPTS_HEADER]: 2 }), classic).deliveryCount).toBe(3);
    // A redelivered classic message: unknown to the broker; the core's store counter decides.
    expect(toEnvelope(message({ [ATTEMPTS_HEADER]: 2 }, true), classic).deliveryCount).toBeUndefined();
    expect(toEnvelope(message({}), { ...classic, retry: 'requeue' }).deliveryCount).toBeUndefined();
    expect(toEnvelope(message({}), quorum).deliveryCount).toBe(1);
    expect(toEnvelope(message({ 'x-delivery-count': 2 }, true), quorum).deliveryCount).toBe(3);
    expect(
      toEnvelope(message({ 'x-delivery-count': 1, [ATTEMPTS_HEADER]: 2 }, true), quorum).deliveryCount,
    ).toBe(4);
  });

  it('stringifies tables as JSON and leaves out nulls', () => {
    expect(stringifyHeaders({ 'x-death': [{ count: 1, reason: 'expired' }], gone: null })).toEqual({
      'x-death': '[{"count":1,"reason":"expired"}]',
    });
  });
});

describe('consumerTimeoutFindings', () => {
  const base = {
    outageHoldMs: 60_000,
    prefetch: 10,
    concurrency: 10,
    queueType: 'classic' as const,
    serverVersion: '3.10.8',
  };

  it('is an error when a handler can outlive a configured consumer_timeout', () => {
    const findings = consumerTimeoutFindings({
      ...base,
      consumerTimeoutMs: 600_000,
      handlerTimeoutMs: 900_000,
    });
    expect(findings.map((f) => f.level)).toEqual(['error']);
  });

  it('only warns when the timeout is assumed', () => {
    const findings = consumerTimeoutFindings({
      ...base,
      consumerTimeoutMs: undefined,
      handlerTimeoutMs: 2_000_000,
    });
    expect(findings.map((f) => f.level)).toEqual(['warn']);
    expect(findings[0]!.message).toContain('assumed');
  });

  it('counts the rounds a buffered delivery waits when prefetch exceeds concurrency', () => {
    const findings = consumerTimeoutFindings({
      ...base,
      prefetch: 40,
      concurrency: 10,
      consumerTimeoutMs: 1_800_000,
      handlerTimeoutMs: 500_000,
    });
    expect(findings.map((f) => f.level)).toEqual(['error']);
    expect(findings[0]!.message).toContain('4 handler runs');
  });

  it('warns about outage holds and sub-minute timeouts, accepts a disabled timeout', () => {
    expect(
      consumerTimeoutFindings({ ...base, consumerTimeoutMs: 100_000, handlerTimeoutMs: 50_000 }).map(
        (f) => f.level,
      ),
    ).toEqual(['warn']);
    expect(
      consumerTimeoutFindings({
        ...base,
        outageHoldMs: 1_000,
        consumerTimeoutMs: 5_000,
        handlerTimeoutMs: 1_000,
      }).map((f) => f.level),
    ).toEqual(['warn', 'ok']);
    expect(
      consumerTimeoutFindings({ ...base, consumerTimeoutMs: false, handlerTimeoutMs: 1e9 })[0]!.level,
    ).toBe('ok');
    expect(
      consumerTimeoutFindings({
        ...base,
        serverVersion: '4.3.1',
        consumerTimeoutMs: 1000,
        handlerTimeoutMs: 1e9,
      })[0]!.level,
    ).toBe('ok');
  });
});
