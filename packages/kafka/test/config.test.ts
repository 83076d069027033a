/** Unit tests: config checks, the record → envelope mapping, dead-letter records. No broker needed. */
import { isOncelyError, resolveMessageId } from '@oncely/core';
import {
  createAdapter,
  DEAD_LETTER_HEADERS,
  deadLetterRecord,
  headersToAttributes,
  resolveKafkaConfig,
  toEnvelope,
} from '@oncely/kafka';
import type { KafkaMessage } from 'kafkajs';
import { describe, expect, it } from 'vitest';

const base = { type: 'kafka', brokers: ['127.0.0.1:9092'], topic: 'orders' } as const;

function configError(broker: Record<string, unknown>): { field: string; message: string } {
  try {
    resolveKafkaConfig(broker as never, 'orders-consumer');
  } catch (error) {
    if (isOncelyError(error, 'CONFIG_INVALID'))
      return { field: (error as any).field, message: error.message };
    throw error;
  }
  throw new Error('expected a ConfigError');
}

function record(overrides: Partial<KafkaMessage> = {}): KafkaMessage {
  // KafkaMessage is a union (message set v0/v1 entries, record batch entries); this is a
  // record-batch entry, the only kind Kafka 4 serves.
  return {
    key: Buffer.from('customer-7'),
    value: Buffer.from('{"n":1}'),
    timestamp: '1700000000000',
    attributes: 0,
    offset: '42',
    headers: { 'message-id': Buffer.from('m-1'), trace: 'abc' },
    ...overrides,
  } as KafkaMessage;
}

describe('resolveKafkaConfig', () => {
  it('fills in the defaults', () => {
    const config = resolveKafkaConfig(base, 'orders-consumer');
    expect(config).toMatchObject({
      brokers: ['127.0.0.1:9092'],
      topic: 'orders',
      groupId: 'orders-consumer',
      clientId: 'oncely-orders-consumer',
      sessionTimeout: 30_000,
      heartbeatInterval: 3000,
      deadLetterTopic: 'orders.dlq',
      createDeadLetterTopic: true,
      fromBeginning: false,
      partitionsConsumedConcurrently: undefined,
    });
    expect(resolveKafkaConfig({ ...base, sessionTimeout: 6000 }, 'c').heartbeatInterval).toBe(600);
  });

  it('passes the kafkajs options through, and takes an injected client instead of brokers', () => {
    const config = resolveKafkaConfig(
      {
        ...base,
        retry: { retries: 2, initialRetryTime: 100 },
        rackId: 'eu-1a',
        minBytes: 1,
        maxBytes: 2048,
        logLevel: 'error',
      },
      'c',
    );
    expect(config).toMatchObject({
      retry: { retries: 2, initialRetryTime: 100 },
      rackId: 'eu-1a',
      minBytes: 1,
      maxBytes: 2048,
      logLevel: 'error',
    });
    expect(resolveKafkaConfig(base, 'c').logLevel).toBe('warn');
    const kafka = { consumer: () => ({}), producer: () => ({}), admin: () => ({}) };
    const injected = resolveKafkaConfig({ type: 'kafka', topic: 'orders', kafka } as never, 'c');
    expect(injected.kafka).toBe(kafka);
    expect(injected.brokers).toEqual([]);
  });

  it('chooses the client library: kafkajs by default, or @platformatic/kafka', () => {
    expect(resolveKafkaConfig(base, 'c').client).toBe('kafkajs');
    const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
    if (major > 22 || (major === 22 && minor >= 22)) {
      expect(resolveKafkaConfig({ ...base, client: 'platformatic' }, 'c').client).toBe('platformatic');
    } else {
      // @platformatic/kafka's engines: Node >= 22.22. It would load, untested.
      const old = configError({ ...base, client: 'platformatic' });
      expect(old.field).toBe('broker.client');
      expect(old.message).toMatch(/Node >= 22\.22/);
    }
    // Your own kafkajs client cannot drive the @platformatic/kafka path.
    const kafka = { consumer: () => ({}), producer: () => ({}), admin: () => ({}) };
    const conflict = configError({ ...base, client: 'platformatic', kafka });
    expect(conflict.field).toBe('broker.kafka');
    expect(conflict.message).toMatch(/platformatic/);
  });

  it('takes your own @platformatic/kafka factories (broker.platformatic), and refuses what is not that', () => {
    const factories = { consumer: () => ({}), producer: () => ({}), admin: () => ({}) };
    const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
    if (major > 22 || (major === 22 && minor >= 22)) {
      // client 'platformatic' implied, brokers optional (the factories give them).
      const injected = resolveKafkaConfig(
        { type: 'kafka', topic: 'orders', platformatic: factories } as never,
        'c',
      );
      expect(injected.client).toBe('platformatic');
      expect(injected.platformatic).toBe(factories);
      expect(injected.brokers).toEqual([]);
    } else {
      const old = configError({ type: 'kafka', topic: 'orders', platformatic: factories });
      expect(old.field).toBe('broker.client');
      expect(old.message).toMatch(/implied by broker\.platformatic.*Node >= 22\.22/);
    }
    const kafkajsClient = { ...factories, logger: () => ({}) };
    const refusals: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ platformatic: factories, client: 'kafkajs' }, 'broker.platformatic', /broker\.client 'kafkajs'/],
      [{ platformatic: factories, kafka: kafkajsClient }, 'broker.platformatic', /not both/],
      [{ platformatic: 'yes' }, 'broker.platformatic', /factories \{ consumer\(options\)/],
      [{ platformatic: { consumer: () => ({}) } }, 'broker.platformatic', /producer, admin missing/],
      // A client where a factory is expected: a @platformatic/kafka Consumer, a KafkaJS Kafka.
      [
        { platformatic: { type: 'consumer', clientId: 'mine' } },
        'broker.platformatic',
        /a @platformatic\/kafka consumer itself/,
      ],
      [
        { platformatic: kafkajsClient },
        'broker.platformatic',
        /looks like a KafkaJS client \(give it as broker\.kafka\)/,
      ],
    ];
    for (const [override, field, message] of refusals) {
      const error = configError({ ...base, ...override });
      expect(error.field).toBe(field);
      expect(error.message).toMatch(message);
    }
  });

  it('accepts brokers as a comma-separated string (environment variables)', () => {
    expect(resolveKafkaConfig({ ...base, brokers: 'a:9092, b:9093' }, 'c').brokers).toEqual([
      'a:9092',
      'b:9093',
    ]);
  });

  it.each([
    [{ brokers: [] }, 'broker.brokers'],
    [{ brokers: ['localhost'] }, 'broker.brokers'],
    [{ topic: '' }, 'broker.topic'],
    [{ topic: 'has space' }, 'broker.topic'],
    [{ groupId: 3 }, 'broker.groupId'],
    [{ sessionTimeout: 10 }, 'broker.sessionTimeout'],
    [{ sessionTimeout: 5000, heartbeatInterval: 5000 }, 'broker.heartbeatInterval'],
    [{ partitionsConsumedConcurrently: 0 }, 'broker.partitionsConsumedConcurrently'],
    [{ deadLetterTopic: 'orders' }, 'broker.deadLetterTopic'],
    [{ fromBeginning: 'yes' }, 'broker.fromBeginning'],
    [{ ssl: 'on' }, 'broker.ssl'],
    [{ sesionTimeout: 1000 }, 'broker.sesionTimeout'],
    [{ retry: { retries: -1 } }, 'broker.retry.retries'],
    [{ retry: { retrys: 1 } }, 'broker.retry.retrys'],
    [{ logLevel: 'loud' }, 'broker.logLevel'],
    [{ minBytes: 0 }, 'broker.minBytes'],
    [{ maxBytes: 10 }, 'broker.maxBytes'],
    [{ rackId: '' }, 'broker.rackId'],
    [{ kafka: {} }, 'broker.kafka'],
    [{ client: 'confluent' }, 'broker.client'],
  ])('%j fails naming %s', (override, field) => {
    expect(configError({ ...base, ...override }).field).toBe(field);
  });

  it('createAdapter checks the config at once', () => {
    expect(() => createAdapter({ type: 'kafka', topic: 'x' }, { consumerName: 'c', log: console })).toThrow(
      /broker\.brokers/,
    );
    const adapter = createAdapter({ ...base, sessionTimeout: 9000 }, { consumerName: 'c', log: console });
    expect(adapter.type).toBe('kafka');
    // The message-id header (a function: in offsets mode a record without it is identified by its offset).
    const strategy = adapter.defaultIdStrategy as (envelope: unknown) => string | undefined;
    expect(strategy({ attributes: { 'message-id': 'm-1' }, brokerMessageId: 't/0/1' })).toBe('m-1');
    expect(strategy({ attributes: {}, brokerMessageId: 't/0/1' })).toBeUndefined();
    // The lease keeper renews at half of extendByMs: a heartbeat every third of the session.
    expect(adapter.lease).toEqual({ extendByMs: 6000 });
  });
});

describe('toEnvelope', () => {
  it('maps a record: headers as strings, broker ID, key, offset', () => {
    const envelope = toEnvelope('orders', 3, record());
    expect(envelope).toMatchObject({
      attributes: { 'message-id': 'm-1', trace: 'abc' },
      brokerMessageId: 'orders/3/42',
      orderingKey: 'customer-7',
      sequence: '42',
      source: 'orders',
      offset: { topic: 'orders', partition: 3, offset: '42' },
    });
    expect(envelope.deliveryCount).toBeUndefined();
    expect(resolveMessageId({ attribute: 'message-id' }, envelope)).toBe('m-1');
    expect(resolveMessageId('broker', envelope)).toBe('orders/3/42');
  });

  it('keeps the last value of a repeated header and drops absent ones', () => {
    expect(headersToAttributes({ a: [Buffer.from('1'), Buffer.from('2')], b: undefined })).toEqual({
      a: '2',
    });
  });

  it('a record without key or message-id header has no ordering key and no ID', () => {
    const envelope = toEnvelope('orders', 0, record({ key: null, headers: {} }));
    expect(envelope.orderingKey).toBeUndefined();
    expect(resolveMessageId({ attribute: 'message-id' }, envelope)).toBeUndefined();
  });
});

describe('deadLetterRecord', () => {
  it('keeps key, value and headers, and adds the reason and origin', () => {
    const dead = deadLetterRecord({
      topic: 'orders',
      partition: 2,
      message: record(),
      consumer: 'orders-consumer',
      reason: 'max-attempts',
      detail: 'x'.repeat(5000),
    });
    expect(dead.key).toEqual(Buffer.from('customer-7'));
    expect(dead.value).toEqual(Buffer.from('{"n":1}'));
    const headers = dead.headers as Record<string, unknown>;
    expect(headers['message-id']).toEqual(Buffer.from('m-1'));
    expect(headers[DEAD_LETTER_HEADERS.reason]).toBe('max-attempts');
    expect(headers[DEAD_LETTER_HEADERS.topic]).toBe('orders');
    expect(headers[DEAD_LETTER_HEADERS.partition]).toBe('2');
    expect(headers[DEAD_LETTER_HEADERS.offset]).toBe('42');
    expect(String(headers[DEAD_LETTER_HEADERS.detail]).length).toBeLessThan(2100);
  });
});
