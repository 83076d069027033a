/**
 * What the Service Bus emulator's layers share: the AMQP condition names the client maps to
 * its error codes, the shapes of topics, subscriptions and emulator-side links, the error a
 * `$management` request fails with, and the message conversions more than one layer uses.
 */
import rhea from 'rhea';
import type { AmqpMessage, LockHolder, MessageEntity, StoredMessage } from './MessageEntity.js';
import type { SubscriptionRule } from './rules.js';

export const amqp = rhea.message as any;
export const types = rhea.types as any;
/** Message format of a batched send (`ServiceBusMessageBatch`): data sections of encoded messages. */
export const BATCH_MESSAGE_FORMAT = 0x80013700;
export const SESSION_FILTER = 'com.microsoft:session-filter';
/** Error conditions the client maps to its error codes (`ServiceBusError.code`). */
export const CONDITIONS = {
  messageLockLost: 'com.microsoft:message-lock-lost',
  sessionLockLost: 'com.microsoft:session-lock-lost',
  sessionCannotBeLocked: 'com.microsoft:session-cannot-be-locked',
  messageNotFound: 'com.microsoft:message-not-found',
  timeout: 'com.microsoft:timeout',
  entityNotFound: 'amqp:not-found',
  notAllowed: 'amqp:not-allowed',
  notImplemented: 'amqp:not-implemented',
  argumentError: 'com.microsoft:argument-error',
  entityAlreadyExists: 'com.microsoft:entity-already-exists',
  deadLetter: 'com.microsoft:dead-letter',
} as const;

export interface Subscription {
  name: string;
  entity: MessageEntity;
  /** In the order they were added; copiesFor (rules.ts) decides what the subscription stores. */
  rules: SubscriptionRule[];
}

export interface Topic {
  name: string;
  ttlMs: number;
  requiresDuplicateDetection: boolean;
  duplicateDetectionWindowMs: number;
  subscriptions: Map<string, Subscription>;
}

/** An emulator-side sender link delivering an entity's messages to one client receiver. */
export interface Outbound extends LockHolder {
  link: any;
  entity: MessageEntity;
  receiveAndDelete: boolean;
  sessionId?: string;
  closed: boolean;
}

/** What an emulator-side link is for. */
export type LinkRole =
  | { kind: 'cbs' }
  | { kind: 'management'; address: string }
  | { kind: 'reply'; address: string }
  | { kind: 'inbound'; address: string }
  | { kind: 'outbound'; outbound: Outbound }
  | { kind: 'rejected' };

/** Duplicate detection's memory: message ID → when it leaves the window. */
export type DuplicateHistory = Map<string, number>;

export class ManagementError extends Error {
  constructor(
    readonly statusCode: number,
    readonly condition: string,
    message: string,
  ) {
    super(message);
  }
}

/** The message as the client receives it: the stored one plus the broker's annotations. */
export function wireMessage(stored: StoredMessage, lockedUntil: number | undefined): AmqpMessage {
  const annotations: Record<string, unknown> = {
    ...(stored.amqp.message_annotations ?? {}),
    'x-opt-sequence-number': types.wrap_long(stored.seq),
    'x-opt-enqueued-time': new Date(stored.enqueuedAt),
  };
  if (lockedUntil !== undefined) annotations['x-opt-locked-until'] = new Date(lockedUntil);
  if (stored.state === 'deferred') annotations['x-opt-message-state'] = 1;
  else if (stored.state === 'scheduled') annotations['x-opt-message-state'] = 2;
  return { ...stored.amqp, delivery_count: stored.failedDeliveries, message_annotations: annotations };
}

export function scheduledTimeOf(message: AmqpMessage): number | undefined {
  const value = message.message_annotations?.['x-opt-scheduled-enqueue-time'];
  if (value === undefined || value === null) return undefined;
  const ms = value instanceof Date ? value.getTime() : Number(value);
  return Number.isFinite(ms) ? ms : undefined;
}

export function stripAddress(address: string): string {
  let path = address.replace(/^amqps?:\/\/[^/]+\//i, '').replace(/^sb:\/\/[^/]+\//i, '');
  while (path.startsWith('/')) path = path.slice(1);
  return path;
}

/** Unwraps rhea's typed values in a decoded map (one level). */
export function plain(value: unknown): Record<string, unknown> | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object') return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = v;
  return out;
}
