import { type BrokerConfig, ConfigError } from '@oncely/core';
import { MemoryBroker } from './MemoryBroker.js';

/**
 * The `broker` section for the memory broker.
 *
 * @example
 * ```ts
 * const broker: MemoryBrokerConfig = { type: 'memory', broker: new MemoryBroker(), queue: 'orders', visibilityTimeoutMs: 5000 };
 * ```
 */
export interface MemoryBrokerConfig {
  type: 'memory';
  /**
   * The broker instance (it belongs to you: the consumer never closes it), or the name
   * of a process-wide one ({@link MemoryBroker.named}), which is how a config from a file
   * or the environment reaches a broker. @default 'default' (`MemoryBroker.named()`)
   */
  broker?: MemoryBroker | string;
  /** Queue to consume. Created with defaults if it does not exist yet. */
  queue: string;
  /** Lease of each delivery, renewed by the lease keeper while the message is held. @default the queue's visibilityTimeoutMs (30000 unless `createQueue` set another) */
  visibilityTimeoutMs?: number;
  /** Most messages fetched per receive (never more than the free handler slots). @default 10 */
  maxBatch?: number;
  /** Long-poll wait of each receive; it ends early on a new message and on stop. @default 20000 */
  pollWaitMs?: number;
}

declare module '@oncely/core' {
  interface BrokerOptionsByType {
    memory: MemoryBrokerConfig;
  }
}

/** Broker config with every default filled in. */
export interface ResolvedMemoryConfig {
  broker: MemoryBroker;
  queue: string;
  visibilityTimeoutMs: number;
  maxBatch: number;
  pollWaitMs: number;
}

const KNOWN_FIELDS = new Set(['type', 'broker', 'queue', 'visibilityTimeoutMs', 'maxBatch', 'pollWaitMs']);
const BROKER_METHODS = [
  'send',
  'receive',
  'ack',
  'nack',
  'release',
  'extend',
  'deadLetter',
  'queueOptions',
] as const;

/**
 * Checks a memory `broker` section and fills in defaults. Throws a `ConfigError` naming
 * the offending field (`broker.queue`, `broker.broker`...).
 *
 * @example
 * ```ts
 * const { visibilityTimeoutMs } = resolveMemoryConfig({ type: 'memory', broker, queue: 'orders' });
 * ```
 */
export function resolveMemoryConfig(section: BrokerConfig | MemoryBrokerConfig): ResolvedMemoryConfig {
  const config = section as BrokerConfig;
  if (typeof config !== 'object' || config === null) throw new ConfigError('broker', 'must be an object');
  if (config.type !== 'memory')
    throw new ConfigError('broker.type', `must be 'memory', got ${show(config.type)}`);
  for (const field of Object.keys(config)) {
    if (!KNOWN_FIELDS.has(field)) {
      throw new ConfigError(
        `broker.${field}`,
        `is not a memory broker option (known: ${[...KNOWN_FIELDS].join(', ')})`,
      );
    }
  }
  const given = config.broker ?? 'default';
  const broker = (typeof given === 'string' ? MemoryBroker.named(given) : given) as MemoryBroker | undefined;
  // Duck-typed rather than instanceof, so two copies of this package still work together.
  const missing = BROKER_METHODS.find((method) => typeof (broker as any)?.[method] !== 'function');
  if (broker === undefined || broker === null || missing) {
    throw new ConfigError(
      'broker.broker',
      `must be a MemoryBroker instance (new MemoryBroker() from @oncely/memory) or the name of one (MemoryBroker.named(name)), got ${describe(broker)}`,
    );
  }
  const queue = config.queue;
  if (typeof queue !== 'string' || queue.trim() === '') {
    throw new ConfigError('broker.queue', `must be a non-empty queue name, got ${show(queue)}`);
  }
  const visibilityTimeoutMs = config.visibilityTimeoutMs ?? broker.queueOptions(queue).visibilityTimeoutMs;
  integerIn(visibilityTimeoutMs, 1, 12 * 3600_000, 'broker.visibilityTimeoutMs');
  const maxBatch = config.maxBatch ?? 10;
  integerIn(maxBatch, 1, 1000, 'broker.maxBatch');
  const pollWaitMs = config.pollWaitMs ?? 20_000;
  integerIn(pollWaitMs, 1, 3600_000, 'broker.pollWaitMs');
  return {
    broker,
    queue,
    visibilityTimeoutMs: visibilityTimeoutMs as number,
    maxBatch: maxBatch as number,
    pollWaitMs: pollWaitMs as number,
  };
}

function integerIn(value: unknown, min: number, max: number, field: string): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${show(value)}`);
  }
}

function show(value: unknown): string {
  return value === undefined ? 'nothing' : (JSON.stringify(value) ?? String(value));
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'object')
    return `an object without ${BROKER_METHODS.filter((m) => typeof (value as any)[m] !== 'function').join(', ')}`;
  return show(value);
}
