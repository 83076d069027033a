/**
 * What the pipeline's stages share: the resolved settings, the shapes a delivery takes as
 * it moves through them, and the one object that wires the stages to each other.
 */

import type { Batcher, Gathering } from '../Batcher.js';
import { isOncelyError } from '../errors.js';
import type { LeaseKeeper } from '../LeaseKeeper.js';
import type { Telemetry } from '../telemetry.js';
import type {
  BrokerAdapter,
  ConsumerConfig,
  ConsumerEvent,
  Delivery,
  IdempotencyStore,
  Logger,
  Message,
  MessageKey,
  PayloadMismatch,
} from '../types.js';
import type { AttemptLedger } from './attemptLedger.js';
import type { BatchRunner } from './batchRunner.js';
import type { Events } from './events.js';
import type { HandlerRunner } from './handlerRunner.js';
import type { Lifecycle } from './lifecycle.js';
import type { Settlement } from './settlement.js';
import type { StoreGuard } from './storeGuard.js';
import type { TransactionalRunner } from './transactionalRunner.js';

/** Resolved config: every optional field filled in. */
export type Settings<TBody, Tx> = Required<
  Omit<
    ConsumerConfig<TBody, Tx>,
    'idStrategy' | 'backoff' | 'batch' | 'payloadFingerprint' | 'telemetry' | 'handler' | 'batchHandler'
  >
> &
  // One of the two handlers is set (validateConsumerConfig).
  Pick<ConsumerConfig<TBody, Tx>, 'backoff' | 'batch' | 'payloadFingerprint' | 'handler' | 'batchHandler'> & {
    idStrategy: NonNullable<ConsumerConfig['idStrategy']>;
  };

/**
 * The stages of one consumer, wired once by the Consumer: each stage reaches the others
 * through this object, so a stage's file imports only the types of the others.
 */
export interface Pipeline<TBody, Tx> {
  readonly settings: Settings<TBody, Tx>;
  readonly store: IdempotencyStore<Tx>;
  readonly adapter: BrokerAdapter;
  readonly log: Logger;
  readonly telemetry: Telemetry;
  readonly events: Events;
  readonly lifecycle: Lifecycle;
  readonly guard: StoreGuard;
  readonly ledger: AttemptLedger;
  readonly handlers: HandlerRunner<TBody, Tx>;
  readonly settlement: Settlement;
  readonly transactional: TransactionalRunner<TBody, Tx>;
  /** Present with the `batch` option: collects prepared deliveries into one transaction. */
  readonly batcher: Batcher<Prepared<TBody>> | undefined;
  readonly batches: BatchRunner<TBody, Tx>;
}

/** How one attempt at the store ended. */
export type Outcome =
  | { kind: 'processed' }
  | { kind: 'duplicate' }
  /** A duplicate whose payload fingerprint differs from the marker's. */
  | { kind: 'mismatch'; mismatch: PayloadMismatch }
  | { kind: 'exhausted' }
  | { kind: 'busy'; retryInMs: number }
  /** Given back without counting: the stop deadline aborted the handler. */
  | { kind: 'release' }
  | { kind: 'failed'; error: unknown };

/** A delivery the pipeline holds: its lease keeper runs until it is settled. */
export interface Held {
  delivery: Delivery;
  keeper: LeaseKeeper;
  event: ConsumerEvent;
}

/** A held delivery with its ID, decoded message and attempt number: ready to run. */
export interface Prepared<TBody> extends Held {
  key: MessageKey;
  attempt: number;
  message: Message<TBody>;
  /** With `payloadFingerprint`: this delivery's fingerprint, stored with its marker. */
  fingerprint?: string;
}

/** A delivery's place in an ordered batch (`dispatchInOrder`). */
export interface Slot<TBody> {
  gathering: Gathering<Prepared<TBody>>;
  index: number;
  /** It was retried or released: it comes again, and what follows it must wait for it. */
  notDone: boolean;
}

/**
 * Set on a delivery once a settlement was attempted (see Settlement.settle): the
 * pipeline's safety net releases any delivery without it. A property of the delivery
 * rather than a WeakSet entry, which costs more per message and in every garbage collection.
 */
export const SETTLED = Symbol('oncely.settled');
/**
 * Set on a delivery that stop() gave up on when its grace ran out: already logged and
 * counted (`ackFailed`), and its adapter is closed, so a settlement that comes later is
 * not sent (and not counted a second time).
 */
export const ABANDONED = Symbol('oncely.abandoned');
/**
 * Set on a delivery the pipeline holds: its lease keeper, which the settlement hands the
 * lease over from before it sends the settlement (LeaseKeeper.handOver). A delivery
 * released before it was held (prefetched after stop() began) has none.
 */
export const LEASE_KEEPER = Symbol('oncely.leaseKeeper');
export type Marked = Delivery & { [SETTLED]?: true; [ABANDONED]?: true; [LEASE_KEEPER]?: LeaseKeeper };

/** Thrown inside the transaction to roll back a claim whose attempts are used up. */
export class AttemptsExhausted extends Error {}

/**
 * Thrown in place of a handler's outcome when the stop deadline aborted it: the message
 * did not fail, the consumer went away, so it is released and the attempt not counted.
 */
export class ReleaseRequested extends Error {}

export function isShutdown(signal: { readonly aborted: boolean; readonly reason: unknown }): boolean {
  return signal.aborted && isOncelyError(signal.reason, 'SHUTDOWN');
}

/**
 * The ordering group of a delivery from an ordered log (a Kafka partition): its records
 * must take effect in offset order. Undefined for a broker without offsets.
 */
export function orderingGroupOf(envelope: Delivery['envelope']): string | undefined {
  const { offset } = envelope;
  return offset === undefined ? undefined : `${offset.topic}\u0000${offset.partition}`;
}

export function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** Waits for `work` (which never rejects) or `ms`, whichever comes first; the work goes on either way. */
export function settledWithin(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
