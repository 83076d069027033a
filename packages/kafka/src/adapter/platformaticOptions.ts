/**
 * What the @platformatic/kafka clients share: connection options from the `broker`
 * section, and its errors in kafkajs' terms (`type`: the Kafka error name, `retriable`).
 * Loads nothing of @platformatic/kafka itself.
 */
import type { Message } from '@platformatic/kafka';
import type { ResolvedKafkaConfig } from '../config.js';
import { type KafkaRecord, kafkaTypedError } from './clientApi.js';

/** Connection options shared by the three clients, from the `broker` section. */
export function baseOptions(config: ResolvedKafkaConfig, clientId: string) {
  const sasl = config.sasl as { mechanism?: string; username?: string; password?: string } | undefined;
  return {
    clientId,
    bootstrapBrokers: config.brokers,
    connectTimeout: config.connectionTimeout,
    requestTimeout: config.requestTimeout,
    timeout: config.requestTimeout,
    ...(config.retry?.retries !== undefined ? { retries: config.retry.retries } : {}),
    ...(config.retry?.initialRetryTime !== undefined ? { retryDelay: config.retry.initialRetryTime } : {}),
    ...(config.ssl ? { tls: config.ssl === true ? {} : (config.ssl as object) } : {}),
    ...(sasl
      ? {
          sasl: {
            ...sasl,
            // kafkajs spells mechanisms in lower case ('scram-sha-256'), @platformatic/kafka in upper.
            mechanism: String(sasl.mechanism ?? 'plain').toUpperCase(),
          } as never,
        }
      : {}),
    ...(config.rackId !== undefined ? { clientRack: config.rackId } : {}),
    autocreateTopics: false,
  };
}

/** The Kafka error name (`apiId`) of an error of @platformatic/kafka, or of one it wraps. */
export function kafkaErrorName(error: unknown, depth = 0): string | undefined {
  if (error === null || typeof error !== 'object' || depth > 5) return undefined;
  const e = error as { apiId?: unknown; errors?: unknown; cause?: unknown; type?: unknown };
  if (typeof e.apiId === 'string') return e.apiId;
  if (typeof e.type === 'string') return e.type;
  if (Array.isArray(e.errors)) {
    for (const inner of e.errors) {
      const name = kafkaErrorName(inner, depth + 1);
      if (name !== undefined) return name;
    }
  }
  return kafkaErrorName(e.cause, depth + 1);
}

/** The error with the Kafka error name in `type` (what the adapter classifies on), else itself. */
export function typed(error: unknown): unknown {
  // Already in kafkajs' terms (one of ours).
  if (typeof (error as { retriable?: unknown } | null)?.retriable === 'boolean') return error;
  const name = kafkaErrorName(error);
  if (name === undefined) return error;
  // kafkajs' `retriable`, from @platformatic/kafka's `canRetry` (of the error or one it wraps).
  return Object.assign(kafkaTypedError(name, error), { retriable: canRetry(error) });
}

/** @platformatic/kafka's `canRetry` of the error, or of any error it wraps. */
export function canRetry(error: unknown, depth = 0): boolean {
  if (error === null || typeof error !== 'object' || depth > 5) return false;
  const e = error as { canRetry?: unknown; errors?: unknown; cause?: unknown };
  if (e.canRetry === true) return true;
  if (Array.isArray(e.errors) && e.errors.some((inner) => canRetry(inner, depth + 1))) return true;
  return canRetry(e.cause, depth + 1);
}

/** A record of @platformatic/kafka in kafkajs' shape (what the envelope and dead letters read). */
export function toKafkaRecord(message: Message<Buffer, Buffer, Buffer, Buffer>): KafkaRecord {
  const headers: Record<string, Buffer | Buffer[]> = {};
  for (const [key, value] of message.headerEntries) {
    const name = key.toString('utf8');
    const seen = headers[name];
    headers[name] = seen === undefined ? value : Array.isArray(seen) ? [...seen, value] : [seen, value];
  }
  return {
    key: message.key ?? null,
    value: message.value ?? null,
    timestamp: message.timestamp.toString(),
    attributes: 0,
    offset: message.offset.toString(),
    headers,
  } as KafkaRecord;
}
