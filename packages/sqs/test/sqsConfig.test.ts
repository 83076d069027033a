import { ConfigError, isOncelyError, LeaseLostError } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { SqsOperationError, toSettlementError } from '../src/errors.js';
import { parseSqsConfig, regionFromQueueUrl } from '../src/sqsConfig.js';

const queueUrl = 'https://sqs.eu-west-1.amazonaws.com/123456789012/payments';

function fieldOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error.field;
    throw error;
  }
  return undefined;
}

describe('parseSqsConfig', () => {
  it('fills in defaults and takes the region from the queue URL', () => {
    const settings = parseSqsConfig({ type: 'sqs', queueUrl });
    // authErrorBackoffMs: 10 s after a receive refused for credentials (receiveOptions.test
    // shows the wait itself, with a longer setting).
    expect(settings).toMatchObject({
      queueUrl,
      waitTimeSeconds: 20,
      region: 'eu-west-1',
      authErrorBackoffMs: 10_000,
    });
    // Decided at start from the queue's type (10 standard, 1 FIFO).
    expect(settings.maxMessages).toBeUndefined();
    expect(settings.visibilityTimeoutMs).toBeUndefined();
    expect(regionFromQueueUrl('http://sqs.us-east-1.localhost:4566/000000000000/q')).toBe('us-east-1');
  });

  it('pauses 1 s after an empty short poll by default, not after an empty long poll', () => {
    expect(parseSqsConfig({ type: 'sqs', queueUrl }).pollingWaitTimeMs).toBe(0);
    expect(parseSqsConfig({ type: 'sqs', queueUrl, waitTimeSeconds: 0 }).pollingWaitTimeMs).toBe(1000);
    expect(
      parseSqsConfig({ type: 'sqs', queueUrl, waitTimeSeconds: 0, pollingWaitTimeMs: 0 }).pollingWaitTimeMs,
    ).toBe(0);
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, pollingWaitTimeMs: -1 }))).toBe(
      'broker.pollingWaitTimeMs',
    );
  });

  it('checks messageAttributeNames and heartbeatIntervalMs', () => {
    expect(parseSqsConfig({ type: 'sqs', queueUrl }).messageAttributeNames).toEqual(['All']);
    expect(
      parseSqsConfig({ type: 'sqs', queueUrl, messageAttributeNames: 'a, b.*' }).messageAttributeNames,
    ).toEqual(['a', 'b.*']);
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, messageAttributeNames: [] }))).toBe(
      'broker.messageAttributeNames',
    );
    expect(
      fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, messageAttributeNames: ['bad name'] })),
    ).toBe('broker.messageAttributeNames');
    expect(
      fieldOf(() =>
        parseSqsConfig({ type: 'sqs', queueUrl, visibilityTimeoutMs: 5000, heartbeatIntervalMs: 5000 }),
      ),
    ).toBe('broker.heartbeatIntervalMs');
  });

  it('rounds the visibility timeout up to whole seconds', () => {
    expect(parseSqsConfig({ type: 'sqs', queueUrl, visibilityTimeoutMs: 1500 }).visibilityTimeoutMs).toBe(
      2000,
    );
  });

  it('names the offending field', () => {
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs' }))).toBe('broker.queueUrl');
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl: 'not a url' }))).toBe('broker.queueUrl');
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, waitTimeSeconds: 21 }))).toBe(
      'broker.waitTimeSeconds',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, maxMessages: 0 }))).toBe(
      'broker.maxMessages',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, maxMessages: 11 }))).toBe(
      'broker.maxMessages',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, visibilityTimeoutMs: 999 }))).toBe(
      'broker.visibilityTimeoutMs',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, visibilityTimeoutMs: 43_200_001 }))).toBe(
      'broker.visibilityTimeoutMs',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, deadLetterQueueUrl: queueUrl }))).toBe(
      'broker.deadLetterQueueUrl',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, queueURL: queueUrl }))).toBe(
      'broker.queueURL',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, region: 'Not A Region' }))).toBe(
      'broker.region',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, credentials: { accessKeyId: 'x' } }))).toBe(
      'broker.credentials',
    );
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, client: {} }))).toBe('broker.client');
    const client = { send: async () => ({}) };
    expect(fieldOf(() => parseSqsConfig({ type: 'sqs', queueUrl, client, region: 'eu-west-1' }))).toBe(
      'broker.region',
    );
  });
});

describe('toSettlementError', () => {
  it('maps stale receipt handles to LeaseLostError by code, including batch Failed[] entries', () => {
    const entry = {
      Id: '0',
      Code: 'ReceiptHandleIsInvalid',
      Message: 'The receipt handle has expired',
      SenderFault: true,
    };
    expect(toSettlementError('DeleteMessageBatch', entry)).toBeInstanceOf(LeaseLostError);
    const notInflight = Object.assign(new Error('x'), { name: 'MessageNotInflight' });
    expect(toSettlementError('ChangeMessageVisibility', notInflight)).toBeInstanceOf(LeaseLostError);
    // The wire form seen on real SQS for an expired handle.
    const expired = Object.assign(
      new Error(
        'Value AQEB... for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.',
      ),
      {
        name: 'AWS.SimpleQueueService.InvalidParameterValue',
        Code: 'AWS.SimpleQueueService.InvalidParameterValue',
      },
    );
    expect(toSettlementError('ChangeMessageVisibility', expired)).toBeInstanceOf(LeaseLostError);
  });

  it('keeps other failures as SqsOperationError with the SQS code', () => {
    const other = { Id: '1', Code: 'InternalError', Message: 'try again', SenderFault: false };
    const mapped = toSettlementError('DeleteMessageBatch', other);
    expect(mapped).toBeInstanceOf(SqsOperationError);
    expect((mapped as SqsOperationError).sqsCode).toBe('InternalError');
    expect(isOncelyError(mapped, 'LEASE_LOST')).toBe(false);
    const badTimeout = Object.assign(new Error('Value 50000 for parameter VisibilityTimeout is invalid.'), {
      name: 'AWS.SimpleQueueService.InvalidParameterValue',
    });
    expect(toSettlementError('ChangeMessageVisibility', badTimeout)).toBeInstanceOf(SqsOperationError);
  });
});
