import { ConfigError } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { parseServiceBusConfig } from '../src/serviceBusConfig.js';

const connectionString =
  'Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true';

function fieldOf(broker: Record<string, unknown>): string | undefined {
  try {
    parseServiceBusConfig(broker);
  } catch (error) {
    return error instanceof ConfigError ? error.field : 'not a ConfigError';
  }
  return undefined;
}

describe('parseServiceBusConfig', () => {
  it('reads a queue or a subscription, with defaults', () => {
    expect(
      parseServiceBusConfig({ type: 'servicebus', connectionString, queueName: 'orders' }),
    ).toMatchObject({
      entityPath: 'orders',
      sessions: false,
      maxWaitTimeMs: 5000,
      maxBatchSize: 32,
      retryStrategy: 'schedule',
    });
    expect(
      parseServiceBusConfig({
        type: 'servicebus',
        connectionString,
        topicName: 'events',
        subscriptionName: 'audit',
      }).entityPath,
    ).toBe('events/Subscriptions/audit');
  });

  it('accepts the strings environment variables give', () => {
    expect(
      parseServiceBusConfig({
        type: 'servicebus',
        connectionString,
        queueName: 'orders',
        sessions: 'true',
        lockDurationMs: '30000',
        maxDeliveryCount: '10',
      }),
    ).toMatchObject({ sessions: true, lockDurationMs: 30_000, maxDeliveryCount: 10 });
  });

  it('names the offending field', () => {
    expect(fieldOf({ type: 'servicebus', queueName: 'orders' })).toBe('broker.connectionString');
    expect(fieldOf({ type: 'servicebus', connectionString })).toBe('broker.queueName');
    expect(fieldOf({ type: 'servicebus', connectionString, queueName: 'q', topicName: 't' })).toBe(
      'broker.queueName',
    );
    expect(fieldOf({ type: 'servicebus', connectionString, queueName: 'q', lockDurationMs: 301_000 })).toBe(
      'broker.lockDurationMs',
    );
    expect(fieldOf({ type: 'servicebus', connectionString, queueName: 'q', sessions: 'yes' })).toBe(
      'broker.sessions',
    );
    expect(fieldOf({ type: 'servicebus', connectionString, queueName: 'q', retryStrategy: 'later' })).toBe(
      'broker.retryStrategy',
    );
    expect(fieldOf({ type: 'servicebus', connectionString, queueName: 'q', queueURL: 'x' })).toBe(
      'broker.queueURL',
    );
  });
});
