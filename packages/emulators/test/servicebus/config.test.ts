import { describe, expect, it } from 'vitest';
import { parseDuration, queueSettings, ServiceBusEmulator } from '../../dist/servicebus/index.js';

describe('Config.json properties', () => {
  it('parses ISO 8601 durations (and milliseconds as numbers)', () => {
    expect(parseDuration('PT1M')).toBe(60_000);
    expect(parseDuration('PT0.5S')).toBe(500);
    expect(parseDuration('P1DT2H')).toBe(93_600_000);
    expect(parseDuration(1500)).toBe(1500);
    expect(() => parseDuration('1 minute')).toThrow(/ISO 8601/);
    expect(() => parseDuration('PT')).toThrow(/ISO 8601/);
  });

  it('applies the service defaults and its 5-minute LockDuration maximum', () => {
    expect(queueSettings({})).toEqual({
      lockDurationMs: 60_000,
      maxDeliveryCount: 10,
      requiresSession: false,
      requiresDuplicateDetection: false,
      duplicateDetectionWindowMs: 600_000,
      defaultTtlMs: Number.POSITIVE_INFINITY,
      deadLetteringOnMessageExpiration: false,
    });
    expect(queueSettings({ LockDuration: 'PT5M' }).lockDurationMs).toBe(300_000);
    expect(() => queueSettings({ LockDuration: 'PT6M' }, 'orders')).toThrow(/orders\.LockDuration/);
    expect(() => queueSettings({ MaxDeliveryCount: 0 }, 'orders')).toThrow(/MaxDeliveryCount/);
  });

  it('refuses a second namespace, a duplicate entity and a SQL filter that does not parse', () => {
    expect(() => new ServiceBusEmulator({ config: { Namespaces: [{ Name: 'a' }, { Name: 'b' }] } })).toThrow(
      /one namespace/,
    );
    const emulator = new ServiceBusEmulator({
      config: { Namespaces: [{ Name: 'ns', Queues: [{ Name: 'q' }] }] },
    });
    expect(emulator.namespace).toBe('ns');
    expect(() => emulator.createQueue('Q')).toThrow(/already exists/);
    emulator.createTopic('t');
    expect(() =>
      emulator.createSubscription('t', 's', {}, [
        { Name: 'sql', Properties: { FilterType: 'Sql', SqlFilter: { SqlExpression: "color = = 'red'" } } },
      ]),
    ).toThrow(/rule sql: expected a value, found '='/);
    emulator.createSubscription('t', 's', {}, [
      { Name: 'sql', Properties: { FilterType: 'Sql', SqlFilter: { SqlExpression: "color = 'red'" } } },
    ]);
  });
});
