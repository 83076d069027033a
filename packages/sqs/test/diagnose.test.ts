import type { ConsumerConfig, DiagnoseReport } from '@oncely/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { diagnose } from '../src/index.js';
import { type Emulator, startEmulator } from './fauxqs.js';

// diagnose() reads the real (emulated) queue's attributes; no store is needed: the
// store and handler below are placeholders diagnose never calls.

let emulator: Emulator;
beforeAll(async () => {
  emulator = await startEmulator();
});
afterAll(async () => {
  await emulator?.stop();
});

function config(broker: Record<string, unknown>, extra: Partial<ConsumerConfig> = {}): ConsumerConfig {
  return {
    name: 'diag',
    broker: { type: 'sqs', client: emulator.client, ...broker } as ConsumerConfig['broker'],
    store: {} as ConsumerConfig['store'],
    handler: async () => {},
    ...extra,
  };
}

function find(report: DiagnoseReport, level: string, text: string) {
  return report.findings.find((f) => f.level === level && f.message.includes(text));
}

describe('diagnose', () => {
  it('reports a missing queue as an error', async () => {
    const queue = await emulator.createQueue('diag-missing');
    emulator.server.deleteQueue(queue.name);
    const report = await diagnose(config({ queueUrl: queue.url }));
    expect(report.broker).toBe('sqs');
    expect(find(report, 'error', 'does not exist')).toBeDefined();
  });

  it('reports a heartbeat not below the visibility, and maxMessages above 1 on a FIFO queue', async () => {
    const queue = await emulator.createQueue('diag-hb', { VisibilityTimeout: '4' }, true);
    const report = await diagnose(
      config({ queueUrl: queue.url, heartbeatIntervalMs: 4000, maxMessages: 10 }),
    );
    expect(find(report, 'error', 'broker.heartbeatIntervalMs 4000')).toBeDefined();
    expect(find(report, 'warn', 'broker.maxMessages 10 on a FIFO queue')).toBeDefined();
  });

  it('reports a bad broker option as an error naming the field', async () => {
    const report = await diagnose(config({ queueUrl: 'http://x/q', maxMessages: 50 }));
    expect(find(report, 'error', 'broker.maxMessages')).toBeDefined();
  });

  it('requires the redrive maxReceiveCount to be above maxAttempts', async () => {
    const dlq = await emulator.createQueue('diag-dlq');
    const redrive = (n: number) => JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: n });
    const equal = await emulator.createQueue('diag-eq', { RedrivePolicy: redrive(5) });
    const above = await emulator.createQueue('diag-above', { RedrivePolicy: redrive(6) });
    const bad = await diagnose(config({ queueUrl: equal.url }, { maxAttempts: 5 }));
    expect(find(bad, 'error', 'maxReceiveCount (5) must be above maxAttempts (5)')).toBeDefined();
    const good = await diagnose(config({ queueUrl: above.url }, { maxAttempts: 5 }));
    expect(good.findings.filter((f) => f.level === 'error')).toEqual([]);
    expect(find(good, 'ok', 'RedrivePolicy target')).toBeDefined();
  });

  it('compares the visibility timeout with handlerTimeoutMs', async () => {
    const queue = await emulator.createQueue('diag-vis', { VisibilityTimeout: '10' });
    const dlq = await emulator.createQueue('diag-vis-dlq');
    const noRenewal = await diagnose(
      config(
        { queueUrl: queue.url, deadLetterQueueUrl: dlq.url },
        { handlerTimeoutMs: 60_000, leaseRenewal: false },
      ),
    );
    expect(find(noRenewal, 'error', 'leaseRenewal is off')).toBeDefined();
    const renewed = await diagnose(
      config({ queueUrl: queue.url, deadLetterQueueUrl: dlq.url }, { handlerTimeoutMs: 60_000 }),
    );
    expect(find(renewed, 'ok', 'heartbeat extends it')).toBeDefined();
    expect(renewed.findings.filter((f) => f.level === 'error')).toEqual([]);
    const tooLong = await diagnose(config({ queueUrl: queue.url }, { handlerTimeoutMs: 13 * 3600_000 }));
    expect(find(tooLong, 'error', '12-hour')).toBeDefined();
  });

  it('flags a queue without any dead-letter destination', async () => {
    const queue = await emulator.createQueue('diag-nodlq');
    const report = await diagnose(config({ queueUrl: queue.url }));
    expect(find(report, 'error', 'no dead-letter destination')).toBeDefined();
  });

  it('checks FIFO content-based deduplication against the ID strategy', async () => {
    const cbd = await emulator.createQueue('diag-cbd', { ContentBasedDeduplication: 'true' }, true);
    const standard = await emulator.createQueue('diag-std');
    const explicit = await emulator.createQueue('diag-fifo', {}, true);
    const refused = await diagnose(config({ queueUrl: cbd.url }, { idStrategy: 'deduplication-id' }));
    expect(find(refused, 'error', 'content-based deduplication')).toBeDefined();
    const attribute = await diagnose(config({ queueUrl: cbd.url }));
    expect(find(attribute, 'warn', 'ContentBasedDeduplication is on')).toBeDefined();
    const onStandard = await diagnose(config({ queueUrl: standard.url }, { idStrategy: 'deduplication-id' }));
    expect(find(onStandard, 'error', 'needs a FIFO queue')).toBeDefined();
    const fiveMinutes = await diagnose(
      config({ queueUrl: explicit.url }, { idStrategy: 'deduplication-id' }),
    );
    expect(find(fiveMinutes, 'warn', '5 minutes')).toBeDefined();
  });
});
