import { describe, expect, it } from 'vitest';
import { BrokerConnectionError, isOncelyError, redactSecrets } from '../src/index.js';

describe('BrokerConnectionError', () => {
  it('names the broker, the address and the cause, secrets redacted', () => {
    const cause = Object.assign(new Error('getaddrinfo ENOTFOUND rabbit'), { code: 'ENOTFOUND' });
    const error = new BrokerConnectionError('rabbitmq', 'amqp://app:hunter2@rabbit:5672/prod', { cause });
    expect(isOncelyError(error, 'BROKER_UNREACHABLE')).toBe(true);
    expect(error.message).toBe(
      'cannot connect to RabbitMQ at amqp://app:***@rabbit:5672/prod: getaddrinfo ENOTFOUND rabbit',
    );
    expect(error.cause).toBe(cause);
    const coded = new BrokerConnectionError('kafka', undefined, {
      cause: Object.assign(new Error('Connection timeout'), { code: 'ETIMEDOUT' }),
    });
    expect(coded.message).toBe('cannot connect to Kafka: Connection timeout (ETIMEDOUT)');
  });

  it('redacts URL passwords and key=value secrets', () => {
    expect(redactSecrets('amqp://u:p@a:1, amqps://v:q@b:2')).toBe('amqp://u:***@a:1, amqps://v:***@b:2');
    expect(redactSecrets('Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=abc=')).toBe(
      'Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=***',
    );
    expect(redactSecrets('host=db password=secret dbname=x')).toBe('host=db password=*** dbname=x');
    expect(redactSecrets('amqp://rabbit:5672')).toBe('amqp://rabbit:5672');
  });
});
