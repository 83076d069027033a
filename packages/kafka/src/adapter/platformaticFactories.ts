/**
 * Where the @platformatic/kafka clients come from: `new Consumer(options)` (and Producer,
 * Admin) from the `broker` section, or your own factories (`broker.platformatic`) called
 * with the same options. What a factory returns is checked: a client of the kind asked
 * for (its `type`), and a consumer of the group asked for.
 */

import { ConfigError } from '@oncely/core';
import { Admin, Consumer, Producer } from '@platformatic/kafka';
import type { PlatformaticClientFactories, ResolvedKafkaConfig } from '../config.js';

type ClientKind = keyof PlatformaticClientFactories;
type ConsumerOptions = ConstructorParameters<typeof Consumer<Buffer, Buffer, Buffer, Buffer>>[0];
type ProducerOptions = ConstructorParameters<typeof Producer<Buffer, Buffer, Buffer, Buffer>>[0];
type AdminOptions = ConstructorParameters<typeof Admin>[0];

/** A group member's or a scan's consumer. */
export function newConsumer(config: ResolvedKafkaConfig, options: ConsumerOptions): Consumer {
  const consumer = fromFactory(config, 'consumer', options, (o) => new Consumer(o as ConsumerOptions));
  if (consumer.groupId !== options.groupId) {
    throw new ConfigError(
      'broker.platformatic.consumer',
      `returned a consumer of group ${JSON.stringify(consumer.groupId)}, asked for ${JSON.stringify(options.groupId)}: keep the options' groupId`,
    );
  }
  return consumer;
}

/** The adapter's idempotent producer. */
export function newProducer(
  config: ResolvedKafkaConfig,
  options: ProducerOptions,
): Producer<Buffer, Buffer, Buffer, Buffer> {
  return fromFactory(config, 'producer', options, (o) => new Producer(o as ProducerOptions));
}

export function newAdmin(config: ResolvedKafkaConfig, options: AdminOptions): Admin {
  return fromFactory(config, 'admin', options, (o) => new Admin(o as AdminOptions));
}

function fromFactory<T>(
  config: ResolvedKafkaConfig,
  kind: ClientKind,
  options: any,
  own: (options: unknown) => T,
): T {
  const factory = config.platformatic?.[kind];
  if (factory === undefined) return own(options);
  const client = factory.call(config.platformatic, options) as { type?: unknown } | null | undefined;
  const type = typeof client === 'object' && client !== null ? client.type : undefined;
  if (type !== kind) {
    throw new ConfigError(
      `broker.platformatic.${kind}`,
      `must return a new @platformatic/kafka ${kind[0]!.toUpperCase()}${kind.slice(1)} built from the options given; got ${describe(client)}`,
    );
  }
  return client as T;
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (typeof value !== 'object') return typeof value;
  const type = (value as { type?: unknown }).type;
  if (typeof type === 'string') return `a @platformatic/kafka ${type}`;
  if (value instanceof Promise) return 'a Promise (the factory must return the client itself)';
  return `an object without @platformatic/kafka's client type (${value.constructor?.name ?? 'Object'})`;
}
