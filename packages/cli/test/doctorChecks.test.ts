import { describe, expect, it } from 'vitest';
import { formatMs, leaseLimitFindings, retentionFindings } from '../src/doctorChecks.js';

const MIN = 60_000;
const DAY = 24 * 60 * MIN;
const levels = (findings: Array<{ level: string }>) => findings.map((f) => f.level);

describe('doctor: handlerTimeoutMs against each broker lease limit', () => {
  it('SQS: 12 hours of total visibility per receipt', () => {
    expect(levels(leaseLimitFindings({ broker: { type: 'sqs' }, handlerTimeoutMs: 11 * 60 * MIN }))).toEqual([
      'ok',
    ]);
    const [finding] = leaseLimitFindings({ broker: { type: 'sqs' }, handlerTimeoutMs: 13 * 60 * MIN });
    expect(finding).toEqual({
      level: 'error',
      message: expect.stringContaining("SQS's 12-hour total visibility"),
    });
    expect(
      levels(
        leaseLimitFindings({
          broker: { type: 'sqs', visibilityTimeoutMs: 30_000 },
          handlerTimeoutMs: 60_000,
          leaseRenewal: false,
        }),
      ),
    ).toEqual(['error']);
  });

  it('Service Bus: the lock (5 minutes at most) unless renewed', () => {
    expect(
      levels(leaseLimitFindings({ broker: { type: 'servicebus' }, handlerTimeoutMs: 20 * MIN })),
    ).toEqual(['ok']);
    expect(
      leaseLimitFindings({
        broker: { type: 'servicebus' },
        handlerTimeoutMs: 6 * MIN,
        leaseRenewal: false,
      })[0],
    ).toEqual({ level: 'error', message: expect.stringContaining('Service Bus lock with leaseRenewal off') });
    expect(
      levels(
        leaseLimitFindings({
          broker: { type: 'servicebus', lockDurationMs: 30_000 },
          handlerTimeoutMs: 45_000,
          leaseRenewal: false,
        }),
      ),
    ).toEqual(['error']);
  });

  it('Pub/Sub: 600 s per ack deadline unless extended', () => {
    expect(levels(leaseLimitFindings({ broker: { type: 'pubsub' }, handlerTimeoutMs: 30 * MIN }))).toEqual([
      'ok',
    ]);
    expect(
      levels(
        leaseLimitFindings({ broker: { type: 'pubsub' }, handlerTimeoutMs: 11 * MIN, leaseRenewal: false }),
      ),
    ).toEqual(['error']);
  });

  it('RabbitMQ: consumer_timeout, 30 minutes by default, or the configured one', () => {
    expect(levels(leaseLimitFindings({ broker: { type: 'rabbitmq' }, handlerTimeoutMs: 29 * MIN }))).toEqual([
      'ok',
    ]);
    expect(leaseLimitFindings({ broker: { type: 'rabbitmq' }, handlerTimeoutMs: 30 * MIN })[0]).toEqual({
      level: 'error',
      message: expect.stringContaining("RabbitMQ's default consumer_timeout (1800000 ms)"),
    });
    expect(
      levels(
        leaseLimitFindings({
          broker: { type: 'rabbitmq', consumerTimeoutMs: 2 * 3600_000 },
          handlerTimeoutMs: 40 * MIN,
        }),
      ),
    ).toEqual(['ok']);
    expect(
      levels(
        leaseLimitFindings({
          broker: { type: 'rabbitmq', consumerTimeoutMs: false },
          handlerTimeoutMs: 5 * 3600_000,
        }),
      ),
    ).toEqual(['ok']);
  });

  it('Kafka: the session timeout without heartbeats, the rebalance timeout always', () => {
    expect(levels(leaseLimitFindings({ broker: { type: 'kafka' }, handlerTimeoutMs: 30_000 }))).toEqual([
      'ok',
    ]);
    expect(
      levels(
        leaseLimitFindings({ broker: { type: 'kafka' }, handlerTimeoutMs: 30_000, leaseRenewal: false }),
      ),
    ).toEqual(['error']);
    expect(leaseLimitFindings({ broker: { type: 'kafka' }, handlerTimeoutMs: 90_000 })[0]).toEqual({
      level: 'warn',
      message: expect.stringContaining('rebalanceTimeout (60000 ms)'),
    });
    expect(
      levels(
        leaseLimitFindings({
          broker: { type: 'kafka', rebalanceTimeout: 120_000 },
          handlerTimeoutMs: 90_000,
        }),
      ),
    ).toEqual(['ok']);
  });
});

describe('doctor: prune retention against the redelivery horizon', () => {
  it('warns when markers are pruned before the broker stops redelivering', () => {
    expect(retentionFindings({ broker: { type: 'sqs' } }, 4 * DAY)[0]).toEqual({
      level: 'warn',
      message: expect.stringContaining("retention 4d is shorter than sqs's redelivery horizon (14d)"),
    });
    expect(levels(retentionFindings({ broker: { type: 'sqs' } }, 14 * DAY))).toEqual(['ok']);
    expect(levels(retentionFindings({ broker: { type: 'pubsub' } }, 14 * DAY))).toEqual(['warn']);
    expect(levels(retentionFindings({ broker: { type: 'pubsub' } }, 31 * DAY))).toEqual(['ok']);
    expect(levels(retentionFindings({ broker: { type: 'kafka' } }, 3 * DAY))).toEqual(['warn']);
    expect(levels(retentionFindings({ broker: { type: 'kafka' } }, 7 * DAY))).toEqual(['ok']);
    expect(levels(retentionFindings({ broker: { type: 'memory' } }, 60 * MIN))).toEqual(['ok']);
  });

  it('says where the horizon is unbounded, and when the retention was not given', () => {
    expect(retentionFindings({ broker: { type: 'rabbitmq' } }, 30 * DAY)[0]).toEqual({
      level: 'warn',
      message: expect.stringContaining('rabbitmq has no redelivery horizon of its own'),
    });
    expect(levels(retentionFindings({ broker: { type: 'servicebus' } }, 30 * DAY))).toEqual(['warn']);
    expect(retentionFindings({ broker: { type: 'sqs' } }, undefined)[0]).toEqual({
      level: 'warn',
      message: expect.stringContaining('retention: not checked; pass --retention'),
    });
  });

  it('formats ages with their largest whole unit', () => {
    expect([formatMs(14 * DAY), formatMs(90 * MIN), formatMs(1500), formatMs(2000)]).toEqual([
      '14d',
      '90m',
      '1500ms',
      '2s',
    ]);
  });
});
