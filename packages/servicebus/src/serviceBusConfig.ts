import type { ServiceBusClient, ServiceBusClientOptions } from '@azure/service-bus';
import { ConfigError } from '@oncely/core';

/**
 * The `broker` section for Service Bus (`type: 'servicebus'`). One entity per consumer:
 * a queue (`queueName`) or a subscription (`topicName` + `subscriptionName`). Values may
 * arrive as strings from environment variables (`ONCELY_BROKER_QUEUE_NAME`).
 *
 * @example
 * ```ts
 * const broker: ServiceBusBrokerConfig = {
 *   type: 'servicebus',
 *   connectionString: process.env.SERVICEBUS_CONNECTION_STRING!,
 *   queueName: 'payments',
 *   lockDurationMs: 60_000,
 *   maxDeliveryCount: 10,
 * };
 * ```
 */
export interface ServiceBusBrokerConfig {
  type: 'servicebus';
  /** Namespace connection string (`Endpoint=sb://…`). Required unless `client` is given. */
  connectionString?: string;
  /** An existing client (not JSON: in-process configs only). The adapter then never closes it. */
  client?: ServiceBusClient;
  /** Options for the client the adapter builds (retry options, web sockets). */
  clientOptions?: ServiceBusClientOptions;
  /** The queue to consume; or `topicName` + `subscriptionName`. */
  queueName?: string;
  topicName?: string;
  subscriptionName?: string;
  /**
   * The entity requires sessions: receive through sessions, one message of a session at
   * a time, in order, several sessions at once up to `concurrency`. @default false
   */
  sessions?: boolean;
  /**
   * The entity's LockDuration, when known. The lease keeper renews every half of it.
   * Otherwise the adapter learns it from each delivery's `lockedUntilUtc`. @default learned
   */
  lockDurationMs?: number;
  /**
   * The entity's MaxDeliveryCount, when known: start fails when it is not above
   * `maxAttempts` (Service Bus would dead-letter first, without Oncely's reason).
   * The service default is 10. @default not checked
   */
  maxDeliveryCount?: number;
  /** Longest wait of one receive call for a message while the entity is idle. @default 5000 */
  maxWaitTimeMs?: number;
  /** Most messages asked for in one receive call right after messages arrived (never more than the free slots). @default 32 */
  maxBatchSize?: number;
  /**
   * How a delayed retry is made on a queue: `'schedule'` schedules a copy for later and
   * completes the original (the copy gets its own MessageId, so duplicate detection
   * never drops it, and carries the Oncely ID in `oncely-message-id`); `'hold'` keeps the
   * lock for the delay and then abandons. Subscriptions and sessions always use `'hold'`
   * (a copy sent to the topic would reach every subscription; a scheduled copy would
   * leave its session's order). @default 'schedule'
   */
  retryStrategy?: 'schedule' | 'hold';
}

/** Parsed settings. */
export interface ServiceBusSettings {
  connectionString?: string;
  client?: ServiceBusClient;
  clientOptions?: ServiceBusClientOptions;
  queueName?: string;
  topicName?: string;
  subscriptionName?: string;
  /** `queue` or `topic/Subscriptions/sub`, as the service names it. */
  entityPath: string;
  sessions: boolean;
  lockDurationMs?: number;
  maxDeliveryCount?: number;
  maxWaitTimeMs: number;
  maxBatchSize: number;
  retryStrategy: 'schedule' | 'hold';
}

/** Every option the broker section may have: anything else is refused (a typo fails at boot). */
const KNOWN_OPTIONS = new Set([
  'type',
  'connectionString',
  'client',
  'clientOptions',
  'queueName',
  'topicName',
  'subscriptionName',
  'sessions',
  'lockDurationMs',
  'maxDeliveryCount',
  'maxWaitTimeMs',
  'maxBatchSize',
  'retryStrategy',
]);

/** Service Bus caps LockDuration at 5 minutes. */
export const MAX_LOCK_DURATION_MS = 5 * 60_000;

/**
 * Validates a `broker` section; throws a `ConfigError` naming the field.
 *
 * @example
 * ```ts
 * const settings = parseServiceBusConfig({ type: 'servicebus', connectionString, queueName: 'orders' });
 * ```
 */
export function parseServiceBusConfig(broker: Record<string, unknown>): ServiceBusSettings {
  for (const key of Object.keys(broker)) {
    if (!KNOWN_OPTIONS.has(key)) throw new ConfigError(`broker.${key}`, 'is not a Service Bus option');
  }
  const text = (field: string): string | undefined => {
    const value = broker[field];
    if (value === undefined || value === null || value === '') return undefined;
    if (typeof value !== 'string') throw new ConfigError(`broker.${field}`, 'must be a string');
    return value;
  };
  const integer = (field: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined => {
    const value = broker[field];
    if (value === undefined || value === null || value === '') return undefined;
    const n = typeof value === 'string' ? Number(value) : value;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
      throw new ConfigError(`broker.${field}`, `must be an integer from ${min} to ${max}`);
    }
    return n;
  };
  const flag = (field: string): boolean | undefined => {
    const value = broker[field];
    if (value === undefined || value === null || value === '') return undefined;
    if (value === true || value === 'true') return true;
    if (value === false || value === 'false') return false;
    throw new ConfigError(`broker.${field}`, 'must be true or false');
  };
  const client = broker.client as ServiceBusClient | undefined;
  const connectionString = text('connectionString');
  if (!client && !connectionString) {
    throw new ConfigError('broker.connectionString', 'is required (or pass broker.client)');
  }
  const queueName = text('queueName');
  const topicName = text('topicName');
  const subscriptionName = text('subscriptionName');
  if (queueName && (topicName || subscriptionName)) {
    throw new ConfigError('broker.queueName', 'cannot be combined with topicName/subscriptionName');
  }
  if (!queueName && !(topicName && subscriptionName)) {
    throw new ConfigError('broker.queueName', 'is required (or topicName with subscriptionName)');
  }
  const retryStrategy = text('retryStrategy') ?? 'schedule';
  if (retryStrategy !== 'schedule' && retryStrategy !== 'hold') {
    throw new ConfigError('broker.retryStrategy', "must be 'schedule' or 'hold'");
  }
  return {
    connectionString,
    client,
    clientOptions: broker.clientOptions as ServiceBusClientOptions | undefined,
    queueName,
    topicName,
    subscriptionName,
    entityPath: queueName ?? `${topicName}/Subscriptions/${subscriptionName}`,
    sessions: flag('sessions') ?? false,
    lockDurationMs: integer('lockDurationMs', 100, MAX_LOCK_DURATION_MS),
    maxDeliveryCount: integer('maxDeliveryCount', 1),
    maxWaitTimeMs: integer('maxWaitTimeMs', 1) ?? 5000,
    maxBatchSize: integer('maxBatchSize', 1, 2047) ?? 32,
    retryStrategy,
  };
}

// Adds this adapter's section to the `broker` union of ConsumerConfig (declaration merging),
// so `createConsumer({ broker: { type: 'servicebus', ... } })` is type-checked.
declare module '@oncely/core' {
  interface BrokerOptionsByType {
    servicebus: ServiceBusBrokerConfig;
  }
}
