import type { Envelope, ProcessingMode } from '@oncely/core';
import type { Kafka as KafkaClient, KafkaConfig } from 'kafkajs';
import type { ResolvedKafkaConfig } from './config.js';
import { kafkajsModule } from './kafkajsModule.js';
import { KAFKAJS_LOG_LEVEL } from './kafkaLogger.js';
import { MESSAGE_ID_HEADER } from './send.js';

const KAFKAJS_LOG_LEVELS = {
  nothing: KAFKAJS_LOG_LEVEL.NOTHING,
  error: KAFKAJS_LOG_LEVEL.ERROR,
  warn: KAFKAJS_LOG_LEVEL.WARN,
  info: KAFKAJS_LOG_LEVEL.INFO,
  debug: KAFKAJS_LOG_LEVEL.DEBUG,
} as const;

/**
 * A KafkaJS client built from the `broker` options (brokers, client ID, timeouts, TLS,
 * SASL, retry, log level), with `overrides` on top: what the adapter connects with, and
 * what `diagnose` and `findDeadLetters` use with a client ID and retry of their own.
 *
 * @example
 * ```ts
 * const kafka = buildKafkaClient(resolveKafkaConfig(broker, 'payments'), { clientId: 'payments-doctor' });
 * ```
 */
export function buildKafkaClient(
  config: ResolvedKafkaConfig,
  overrides: Partial<KafkaConfig> = {},
): KafkaClient {
  const { Kafka } = kafkajsModule();
  return new Kafka({
    clientId: config.clientId,
    brokers: config.brokers,
    connectionTimeout: config.connectionTimeout,
    requestTimeout: config.requestTimeout,
    ssl: config.ssl as never,
    sasl: config.sasl as never,
    ...(config.retry ? { retry: config.retry } : {}),
    logLevel: KAFKAJS_LOG_LEVELS[config.logLevel],
    ...overrides,
  });
}

/**
 * The message ID the Kafka adapter reads by default: the `message-id` header. In
 * `offsets` mode the record's offset is its identity (the stored offset, not the ID,
 * decides whether it was applied), so a record without the header gets
 * `topic/partition/offset` instead of being dead-lettered as `missing-id`.
 *
 * @example
 * ```ts
 * defaultMessageId(toEnvelope('orders', 0, record), 'transactional'); // the header, or undefined
 * ```
 */
export function defaultMessageId(envelope: Envelope, mode: ProcessingMode | undefined): string | undefined {
  const header = envelope.attributes[MESSAGE_ID_HEADER];
  if (header !== undefined && header.trim() !== '') return header;
  return mode === 'offsets' ? envelope.brokerMessageId : undefined;
}
