/**
 * The contracts between the three parts of Oncely:
 *
 * - the **store** (`@oncely/postgres`) implements {@link IdempotencyStore};
 * - each **adapter** (`@oncely/sqs`, `@oncely/rabbitmq`, ...) implements {@link BrokerAdapter}
 *   and hands the core {@link Delivery} objects;
 * - the **core** owns the state machine (claim → run → commit → ack) and is the only
 *   place that decides when to ack, retry or dead-letter.
 */

export type * from './types/adapter.js';
export type * from './types/config.js';
export type * from './types/deadLetters.js';
export type * from './types/events.js';
export type * from './types/handler.js';
export type * from './types/store.js';
