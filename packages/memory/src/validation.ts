import { ConfigError, traceHeaders } from '@oncely/core';
import type { QueueSettings } from './QueueState.js';
import type { QueueOptions, ReceiveOptions, SendInput } from './types.js';

// What the broker refuses before it touches a queue: names, queue options, send input, bodies.

/** Attribute that carries the producer-set message ID (the memory adapter's default ID strategy). */
export const MESSAGE_ID_ATTRIBUTE = 'message-id';

/** @default visibility timeout of a queue created without options. */
const DEFAULT_VISIBILITY_TIMEOUT_MS = 30_000;
const MAX_RECEIVE_BATCH = 1000;

export function cloneBody(body: unknown): unknown {
  try {
    return structuredClone(body);
  } catch (error) {
    throw new ConfigError(
      'send.body',
      'must be structured-cloneable (no functions or class instances with private state)',
      {
        cause: error,
      },
    );
  }
}

export function checkQueueName(name: unknown, field: string): asserts name is string {
  if (typeof name !== 'string' || name.trim() === '') {
    throw new ConfigError(
      field,
      `must be a non-empty queue name, got ${JSON.stringify(name) ?? String(name)}`,
    );
  }
}

export function resolveQueueOptions(name: string, options: QueueOptions): QueueSettings {
  if (typeof options !== 'object' || options === null)
    throw new ConfigError('queue options', 'must be an object');
  const visibilityTimeoutMs = options.visibilityTimeoutMs ?? DEFAULT_VISIBILITY_TIMEOUT_MS;
  integerIn(visibilityTimeoutMs, 1, Number.MAX_SAFE_INTEGER, 'visibilityTimeoutMs');
  if (options.maxDeliveries !== undefined)
    integerIn(options.maxDeliveries, 1, Number.MAX_SAFE_INTEGER, 'maxDeliveries');
  if (options.deadLetterQueue !== undefined) {
    checkQueueName(options.deadLetterQueue, 'deadLetterQueue');
    if (options.deadLetterQueue === name)
      throw new ConfigError('deadLetterQueue', `must differ from the queue itself ('${name}')`);
  }
  if (options.fifo !== undefined && typeof options.fifo !== 'boolean')
    throw new ConfigError('fifo', 'must be true or false');
  return {
    visibilityTimeoutMs,
    maxDeliveries: options.maxDeliveries,
    deadLetterQueue: options.deadLetterQueue,
    fifo: options.fifo ?? false,
  };
}

export function checkSendInput(input: SendInput): Record<string, string> {
  if (typeof input !== 'object' || input === null || !('body' in input)) {
    throw new ConfigError('send', 'takes { id?, body, attributes?, groupId?, delayMs? }');
  }
  // The sender's trace context (W3C traceparent), so the consumer's span joins its trace;
  // attributes the caller gives win.
  const attributes: Record<string, string> = traceHeaders();
  for (const [key, value] of Object.entries(input.attributes ?? {})) {
    if (typeof value !== 'string') throw new ConfigError(`send.attributes.${key}`, 'must be a string');
    attributes[key] = value;
  }
  if (input.id !== undefined) {
    if (typeof input.id !== 'string' || input.id === '')
      throw new ConfigError('send.id', 'must be a non-empty string');
    const given = attributes[MESSAGE_ID_ATTRIBUTE];
    if (given !== undefined && given !== input.id) {
      throw new ConfigError(
        'send.id',
        `is '${input.id}' but attribute '${MESSAGE_ID_ATTRIBUTE}' says '${given}'`,
      );
    }
  }
  if (input.groupId !== undefined && (typeof input.groupId !== 'string' || input.groupId === '')) {
    throw new ConfigError('send.groupId', 'must be a non-empty string');
  }
  if (input.delayMs !== undefined) integerIn(input.delayMs, 0, Number.MAX_SAFE_INTEGER, 'send.delayMs');
  return attributes;
}

/** A receive's options, defaults filled in (the visibility timeout from the queue's settings). */
export function checkReceiveOptions(
  options: ReceiveOptions,
  settings: QueueSettings,
): { max: number; visibilityTimeoutMs: number; waitMs: number } {
  const max = options.max ?? 1;
  integerIn(max, 1, MAX_RECEIVE_BATCH, 'receive.max');
  const visibilityTimeoutMs = options.visibilityTimeoutMs ?? settings.visibilityTimeoutMs;
  integerIn(visibilityTimeoutMs, 1, Number.MAX_SAFE_INTEGER, 'receive.visibilityTimeoutMs');
  const waitMs = options.waitMs ?? 0;
  if (typeof waitMs !== 'number' || Number.isNaN(waitMs) || waitMs < 0) {
    throw new ConfigError('receive.waitMs', `must be a number >= 0, got ${String(waitMs)}`);
  }
  return { max, visibilityTimeoutMs, waitMs };
}

export function integerIn(value: unknown, min: number, max: number, field: string): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
}
