// Shared state of the Pub/Sub emulator: the service's limits, what a topic, a subscription,
// a delivered message and a stream are, and small helpers every layer uses.

import {
  Metadata,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type sendUnaryData,
  status,
} from '@grpc/grpc-js';
import { ApiError, invalidArgument } from './apiError.js';
import type { AttributeFilter } from './filter.js';
import type { DurationValue } from './names.js';
import type { EmulatedMessageView } from './PubSubEmulator.js';
import { encodeStatusWithErrorInfo } from './statusDetails.js';

// Limits from the Pub/Sub API reference (Subscription, DeadLetterPolicy, RetryPolicy,
// ModifyAckDeadlineRequest, PublishRequest).
export const DEFAULT_ACK_DEADLINE_S = 10;
export const MAX_ACK_DEADLINE_S = 600;
export const MIN_RETENTION_MS = 10 * 60_000;
export const MAX_SUBSCRIPTION_RETENTION_MS = 7 * 24 * 3_600_000;
export const MAX_TOPIC_RETENTION_MS = 31 * 24 * 3_600_000;
export const DEFAULT_MAX_DELIVERY_ATTEMPTS = 5;
export const DEFAULT_MIN_BACKOFF_MS = 10_000;
export const DEFAULT_MAX_BACKOFF_MS = 600_000;
export const MAX_BACKOFF_MS = 600_000;
export const MAX_ORDERING_KEY_BYTES = 1024;
export const MAX_ATTRIBUTE_KEY_BYTES = 256;
export const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
export const MAX_ATTRIBUTES = 100;
export const MAX_MESSAGES_PER_PUBLISH = 1000;
/** A message (data, attribute keys and values, ordering key) and a Publish request. */
export const MAX_MESSAGE_BYTES = 10_000_000;
export const MAX_PUBLISH_REQUEST_BYTES = 10_000_000;
/**
 * gRPC's own default (4 MB) would refuse a message the service accepts before the
 * handler sees it; the request limit above is the service's, checked in the handler.
 */
export const MAX_GRPC_MESSAGE_BYTES = 16 * 1024 * 1024;
/**
 * Message bytes per Pull or StreamingPull response (at least one message, whatever its
 * size): a message at the 10 MB limit fits within {@link MAX_GRPC_MESSAGE_BYTES}, two do not.
 */
export const MAX_RESPONSE_BYTES = 10_000_000;
/** Messages per StreamingPull response when the stream sets no limit. */
export const MAX_MESSAGES_PER_RESPONSE = 1000;
export const DELETED_TOPIC = '_deleted-topic_';

// ---------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------

export interface PubsubMessageValue {
  data?: Buffer;
  attributes?: Record<string, string>;
  messageId?: string;
  publishTime?: { seconds: string; nanos: number };
  orderingKey?: string;
}

export interface StoredMessage {
  messageId: string;
  data: Buffer;
  attributes: Record<string, string>;
  orderingKey: string;
  publishTimeMs: number;
  size: number;
}

/** Where a delivered message is held: a stream (counts against its flow control) or a Pull. */
export interface Holder {
  outstanding: Set<SubMessage>;
  outstandingBytes: number;
}

export interface SubMessage {
  /** Key in the subscription's `messages` map (publish order). */
  seq: number;
  message: StoredMessage;
  state: 'ready' | 'outstanding' | 'acked';
  deliveries: number;
  /** Not delivered before this time (retry backoff). */
  availableAt: number;
  ackId: string | undefined;
  deadline: number;
  holder: Holder | undefined;
}

export interface TopicState {
  name: string;
  resource: Record<string, unknown>;
  subscriptions: Set<string>;
}

export interface SubscriptionConfig {
  name: string;
  topic: string;
  ackDeadlineSeconds: number;
  retainAckedMessages?: boolean;
  messageRetentionDuration: DurationValue;
  labels?: Record<string, string>;
  enableMessageOrdering?: boolean;
  expirationPolicy?: unknown;
  filter?: string;
  deadLetterPolicy?: { deadLetterTopic?: string; maxDeliveryAttempts?: number };
  retryPolicy?: { minimumBackoff?: DurationValue; maximumBackoff?: DurationValue };
  detached?: boolean;
  enableExactlyOnceDelivery?: boolean;
  pushConfig?: unknown;
  state?: string;
  [field: string]: unknown;
}

export interface StreamState extends Holder {
  call: ServerDuplexStream<any, any>;
  subscription: SubscriptionState;
  ackDeadlineSeconds: number;
  maxMessages: number;
  maxBytes: number;
  timer: NodeJS.Timeout;
  closed: boolean;
}

export interface PullWaiter extends Holder {
  maxMessages: number;
  deliver(received: unknown[]): void;
}

export interface SubscriptionState {
  name: string;
  config: SubscriptionConfig;
  /** In publish order (Map keeps insertion order); keyed by a per-subscription sequence. */
  messages: Map<number, SubMessage>;
  nextSeq: number;
  /** Ordering keys with messages out (outstanding or acked-and-held), in delivery order. */
  keyBatches: Map<string, SubMessage[]>;
  streams: Set<StreamState>;
  pullWaiters: Set<PullWaiter>;
  /** Round-robin cursor over streams. */
  cursor: number;
  /** The compiled `filter`, if the subscription has one. */
  matches?: AttributeFilter;
}

export interface AckEntry {
  subscription: SubscriptionState;
  entry: SubMessage;
}

export class ErrorCollector {
  readonly invalid: Record<string, string> = {};
  count = 0;
  add(ackId: string) {
    this.invalid[ackId] = 'PERMANENT_FAILURE_INVALID_ACK_ID';
    this.count++;
  }
  /**
   * The error the service returns for exactly-once acks it rejects: the failing ack IDs
   * in `google.rpc.ErrorInfo.metadata`, read by the client's `ack-metadata.js`.
   */
  toError(operation: string): ApiError {
    const message = `Some ack IDs in the ${operation} request were invalid.`;
    const metadata = new Metadata();
    metadata.set(
      'grpc-status-details-bin',
      encodeStatusWithErrorInfo(status.INVALID_ARGUMENT, message, {
        reason: 'EXACTLY_ONCE_ACKID_FAILURE',
        domain: 'pubsub.googleapis.com',
        metadata: this.invalid,
      }),
    );
    return new ApiError(status.INVALID_ARGUMENT, message, metadata);
  }
}
export interface StreamingPullRequest {
  subscription?: string;
  ackIds?: string[];
  modifyDeadlineSeconds?: number[];
  modifyDeadlineAckIds?: string[];
  streamAckDeadlineSeconds?: number;
  clientId?: string;
  maxOutstandingMessages?: string | number;
  maxOutstandingBytes?: string | number;
}

/** What the service answers a Pull or StreamingPull on a push subscription (FAILED_PRECONDITION). */
export const PUSH_NOT_PULLABLE = 'This method is not supported for push subscriptions.';

/** A push subscription: its push config names an endpoint. */
export function isPush(config: SubscriptionConfig): boolean {
  return !!(config.pushConfig as { pushEndpoint?: string } | undefined)?.pushEndpoint;
}

export function view(entry: SubMessage): EmulatedMessageView {
  return {
    messageId: entry.message.messageId,
    attributes: entry.message.attributes,
    orderingKey: entry.message.orderingKey,
    data: entry.message.data,
    state: entry.state,
    deliveries: entry.deliveries,
    ...(entry.ackId ? { ackId: entry.ackId } : {}),
    ...(entry.state === 'outstanding' ? { deadline: entry.deadline } : {}),
    ...(entry.state === 'ready' && entry.availableAt > 0 ? { availableAt: entry.availableAt } : {}),
  };
}

export function messageSize(data: Buffer, attributes: Record<string, string>, orderingKey: string): number {
  let size = data.length + Buffer.byteLength(orderingKey);
  for (const [key, value] of Object.entries(attributes))
    size += Buffer.byteLength(key) + Buffer.byteLength(value);
  return size;
}

export function camel(path: string): string {
  return path.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

export function paginate(names: string[], pageSize: number | undefined, pageToken: string | undefined) {
  const offset = pageToken ? Number(pageToken) : 0;
  if (!Number.isInteger(offset) || offset < 0) throw invalidArgument('Invalid page token.');
  const size = pageSize && pageSize > 0 ? pageSize : names.length;
  const page = names.slice(offset, offset + size);
  const next = offset + size < names.length ? String(offset + size) : '';
  return { page, nextPageToken: next };
}

/** A unary handler whose `ApiError`s become the call's status (and trailers). */
export function unary<Req>(handle: (request: Req) => unknown) {
  return (call: ServerUnaryCall<Req, unknown>, callback: sendUnaryData<unknown>) => {
    try {
      callback(null, handle(call.request));
    } catch (error) {
      if (error instanceof ApiError) callback(error);
      else callback(new ApiError(status.INTERNAL, String(error)));
    }
  };
}
