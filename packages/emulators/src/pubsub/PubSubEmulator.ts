import { randomBytes } from 'node:crypto';
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type sendUnaryData,
  status,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { ApiError, alreadyExists, failedPrecondition, invalidArgument, notFound } from './apiError.js';
import { type SettlementFailure, type SettlementFailureHandle, SettlementFaults } from './faults.js';
import {
  type DurationValue,
  durationToMs,
  msToDuration,
  msToTimestamp,
  parseProjectName,
  parseSubscriptionName,
  parseTopicName,
} from './names.js';
import { loadPubSubServices, type PubSubServices } from './protos.js';
import { pushConfigOf } from './pushConfig.js';
import { encodeStatusWithErrorInfo } from './statusDetails.js';

// Limits from the Pub/Sub API reference (Subscription, DeadLetterPolicy, RetryPolicy,
// ModifyAckDeadlineRequest, PublishRequest).
const DEFAULT_ACK_DEADLINE_S = 10;
const MAX_ACK_DEADLINE_S = 600;
const MIN_RETENTION_MS = 10 * 60_000;
const MAX_SUBSCRIPTION_RETENTION_MS = 7 * 24 * 3_600_000;
const MAX_TOPIC_RETENTION_MS = 31 * 24 * 3_600_000;
const DEFAULT_MAX_DELIVERY_ATTEMPTS = 5;
const DEFAULT_MIN_BACKOFF_MS = 10_000;
const DEFAULT_MAX_BACKOFF_MS = 600_000;
const MAX_BACKOFF_MS = 600_000;
const MAX_ORDERING_KEY_BYTES = 1024;
const MAX_ATTRIBUTE_KEY_BYTES = 256;
const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
const MAX_ATTRIBUTES = 100;
const MAX_MESSAGES_PER_PUBLISH = 1000;
/** A message (data, attribute keys and values, ordering key) and a Publish request. */
const MAX_MESSAGE_BYTES = 10_000_000;
const MAX_PUBLISH_REQUEST_BYTES = 10_000_000;
/**
 * gRPC's own default (4 MB) would refuse a message the service accepts before the
 * handler sees it; the request limit above is the service's, checked in the handler.
 */
const MAX_GRPC_MESSAGE_BYTES = 16 * 1024 * 1024;
/** Messages per StreamingPull response when the stream sets no limit. */
const MAX_MESSAGES_PER_RESPONSE = 1000;
const DELETED_TOPIC = '_deleted-topic_';

/**
 * Options of {@link startPubSubEmulator}.
 *
 * @example
 * ```ts
 * const options: PubSubEmulatorOptions = { port: 0, minAckDeadlineSeconds: 1 };
 * ```
 */
export interface PubSubEmulatorOptions {
  /** TCP port; 0 picks a free one. @default 8085 (the official emulator's) */
  port?: number;
  /** Interface to listen on. @default '127.0.0.1' */
  host?: string;
  /**
   * Lowest ack deadline accepted for a subscription (`ackDeadlineSeconds`) and a stream
   * (`streamAckDeadlineSeconds`). The service's is 10 s; tests lower it to 1 to keep
   * lease scenarios short (client side, set `minAckDeadline`/`maxAckDeadline` too, see
   * docs/pubsub.md). ModifyAckDeadline accepts 0–600 s as the service does. @default 10
   */
  minAckDeadlineSeconds?: number;
  /**
   * The server closes each StreamingPull stream with UNAVAILABLE after this long, as the
   * service does (the client reopens it). @default 1_800_000 (30 min)
   */
  streamTimeoutMs?: number;
  /** How long a unary Pull waits for messages before answering empty. @default 1000 */
  pullWaitMs?: number;
  /** Resolution of ack-deadline expiry, retry backoff and retention. @default 25 */
  tickMs?: number;
  /** Receives one line per notable event (stream opened/closed, dead-lettered). @default none */
  log?: (line: string) => void;
  /**
   * The clock for ack deadlines, retry backoff, retention and publish times (epoch ms).
   * Tests pass a clock they move forward to check retention without waiting days.
   * @default Date.now
   */
  now?: () => number;
}

/**
 * What the emulator knows about one message of a subscription (test inspection).
 *
 * @example
 * ```ts
 * const held = emulator.inspectSubscription(name)?.messages.filter((m) => m.state === 'outstanding');
 * ```
 */
export interface EmulatedMessageView {
  messageId: string;
  attributes: Readonly<Record<string, string>>;
  orderingKey: string;
  data: Buffer;
  state: 'ready' | 'outstanding' | 'acked';
  /** Deliveries made so far. */
  deliveries: number;
  /** The valid ack ID while outstanding. */
  ackId?: string;
  /** When the ack deadline lapses (epoch ms), while outstanding. */
  deadline?: number;
}

/**
 * Counts of one subscription (test inspection).
 *
 * @example
 * ```ts
 * const { ready, outstanding } = emulator.inspectSubscription(name)!;
 * ```
 */
export interface SubscriptionView {
  /** Waiting for delivery (including those in retry backoff). */
  ready: number;
  /** Delivered and neither acked, nacked nor expired. */
  outstanding: number;
  /** Acked but held because an earlier message of their ordering key is still out. */
  acked: number;
  /** Open StreamingPull streams. */
  streams: number;
  messages: EmulatedMessageView[];
}

/**
 * A running emulator.
 *
 * @example
 * ```ts
 * const emulator = await startPubSubEmulator({ port: 0 });
 * const pubsub = new PubSub({ projectId: 'test', apiEndpoint: emulator.address, emulatorMode: true });
 * await emulator.stop();
 * ```
 */
export interface PubSubEmulator {
  readonly host: string;
  readonly port: number;
  /** `host:port`, the value for `PUBSUB_EMULATOR_HOST` or the client's `apiEndpoint`. */
  readonly address: string;
  /** Closes every stream and connection; the state is discarded. */
  stop(): Promise<void>;
  /**
   * Test hook: shuts the server down (every connection and stream drops) and listens
   * again on the same port after `downMs` (default 0), keeping topics, subscriptions,
   * messages and leases (which keep running while it is down).
   */
  restart(options?: { downMs?: number }): Promise<void>;
  /**
   * Test hook: ends the StreamingPull streams (of one subscription, or all) from the
   * server side with UNAVAILABLE, as the service does on its own; the client reopens
   * them. Leases of messages delivered on them stay valid. Returns how many were closed.
   */
  disconnectStreams(subscription?: string): number;
  /**
   * Test hook: ends the StreamingPull streams (of one subscription, or all) from the
   * server side with `code` (a gRPC status) and `message`. The client reopens a stream
   * only after the statuses it retries (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, ...);
   * after any other (NOT_FOUND, INVALID_ARGUMENT, ...) it closes its subscriber. Leases
   * of messages delivered on them stay valid. Returns how many were ended.
   */
  endStreams(subscription: string | undefined, code: number, message?: string): number;
  /**
   * Test hook: the next `failure.count` Acknowledge / ModifyAckDeadline requests that
   * match fail with the chosen status (a transient UNAVAILABLE, FAILED_PRECONDITION) or
   * with a per-ack-ID reason in `ErrorInfo`, as exactly-once subscriptions answer
   * (`PERMANENT_FAILURE_INVALID_ACK_ID`, `TRANSIENT_FAILURE_*`). A failed request applies
   * none of its ack IDs. The handle counts the failed requests and ends the failure early.
   */
  failSettlements(failure: SettlementFailure): SettlementFailureHandle;
  /**
   * Test hook: lets the ack deadline of outstanding messages lapse now, as if it had
   * expired: each is redelivered (with a fresh ack ID) or dead-lettered.
   */
  expireLeases(subscription: string, filter?: (message: EmulatedMessageView) => boolean): number;
  /** Test inspection of a subscription; `undefined` if it does not exist. */
  inspectSubscription(subscription: string): SubscriptionView | undefined;
}

// ---------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------

interface PubsubMessageValue {
  data?: Buffer;
  attributes?: Record<string, string>;
  messageId?: string;
  publishTime?: { seconds: string; nanos: number };
  orderingKey?: string;
}

interface StoredMessage {
  messageId: string;
  data: Buffer;
  attributes: Record<string, string>;
  orderingKey: string;
  publishTimeMs: number;
  size: number;
}

/** Where a delivered message is held: a stream (counts against its flow control) or a Pull. */
interface Holder {
  outstanding: Set<SubMessage>;
  outstandingBytes: number;
}

interface SubMessage {
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

interface TopicState {
  name: string;
  resource: Record<string, unknown>;
  subscriptions: Set<string>;
}

interface SubscriptionConfig {
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

interface StreamState extends Holder {
  call: ServerDuplexStream<any, any>;
  subscription: SubscriptionState;
  ackDeadlineSeconds: number;
  maxMessages: number;
  maxBytes: number;
  timer: NodeJS.Timeout;
  closed: boolean;
}

interface PullWaiter extends Holder {
  maxMessages: number;
  deliver(received: unknown[]): void;
}

interface SubscriptionState {
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
}

interface AckEntry {
  subscription: SubscriptionState;
  entry: SubMessage;
}

class ErrorCollector {
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

// ---------------------------------------------------------------------------------------
// The emulator
// ---------------------------------------------------------------------------------------

class PubSubEmulatorImpl implements PubSubEmulator {
  host: string;
  port: number;
  private server: Server | undefined;
  private readonly services: PubSubServices;
  private readonly topics = new Map<string, TopicState>();
  private readonly subscriptions = new Map<string, SubscriptionState>();
  private readonly ackIds = new Map<string, AckEntry>();
  private readonly faults = new SettlementFaults();
  private readonly minAckDeadlineS: number;
  private readonly streamTimeoutMs: number;
  private readonly pullWaitMs: number;
  private readonly log: (line: string) => void;
  private readonly ticker: NodeJS.Timeout;
  private messageCounter = 0;
  private readonly now: () => number;

  constructor(options: PubSubEmulatorOptions) {
    this.host = options.host ?? '127.0.0.1';
    this.port = options.port ?? 8085;
    this.minAckDeadlineS = options.minAckDeadlineSeconds ?? DEFAULT_ACK_DEADLINE_S;
    this.streamTimeoutMs = options.streamTimeoutMs ?? 30 * 60_000;
    this.pullWaitMs = options.pullWaitMs ?? 1000;
    this.log = options.log ?? (() => {});
    this.now = options.now ?? Date.now;
    this.services = loadPubSubServices();
    this.ticker = setInterval(() => this.tick(), options.tickMs ?? 25);
    this.ticker.unref();
  }

  get address(): string {
    return `${this.host}:${this.port}`;
  }

  async listen(): Promise<void> {
    const server = new Server({
      'grpc.max_receive_message_length': MAX_GRPC_MESSAGE_BYTES,
      'grpc.max_send_message_length': MAX_GRPC_MESSAGE_BYTES,
    });
    server.addService(this.services.publisher, this.publisherHandlers());
    server.addService(this.services.subscriber, this.subscriberHandlers());
    this.port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(`${this.host}:${this.port}`, ServerCredentials.createInsecure(), (error, port) =>
        error ? reject(error) : resolve(port),
      );
    });
    this.server = server;
  }

  async stop(): Promise<void> {
    clearInterval(this.ticker);
    await this.shutdown();
    for (const subscription of this.subscriptions.values()) {
      for (const waiter of subscription.pullWaiters) waiter.deliver([]);
    }
  }

  async restart(options: { downMs?: number } = {}): Promise<void> {
    await this.shutdown();
    if (options.downMs) await new Promise((resolve) => setTimeout(resolve, options.downMs));
    await this.listen();
  }

  private async shutdown(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    for (const subscription of this.subscriptions.values()) {
      for (const stream of [...subscription.streams]) this.closeStream(stream);
    }
    // forceShutdown cancels every call and closes every connection: what a process
    // restart looks like to the client.
    server.forceShutdown();
  }

  disconnectStreams(subscription?: string): number {
    return this.endStreams(
      subscription,
      status.UNAVAILABLE,
      'The service was unable to fulfill your request.',
    );
  }

  endStreams(subscription: string | undefined, code: number, message = `Stream ended with status ${code}.`) {
    let closed = 0;
    for (const state of this.subscriptions.values()) {
      if (subscription !== undefined && state.name !== subscription) continue;
      for (const stream of [...state.streams]) {
        this.endStream(stream, code === status.OK ? undefined : new ApiError(code, message));
        closed++;
      }
    }
    return closed;
  }

  failSettlements(failure: SettlementFailure): SettlementFailureHandle {
    return this.faults.add(failure);
  }

  expireLeases(subscription: string, filter?: (message: EmulatedMessageView) => boolean): number {
    const state = this.subscriptions.get(subscription);
    if (!state) return 0;
    let expired = 0;
    for (const entry of [...state.messages.values()]) {
      if (entry.state !== 'outstanding') continue;
      if (filter && !filter(view(entry))) continue;
      this.redeliverOrDeadLetter(state, entry);
      expired++;
    }
    this.pump(state);
    return expired;
  }

  inspectSubscription(subscription: string): SubscriptionView | undefined {
    const state = this.subscriptions.get(subscription);
    if (!state) return undefined;
    const messages = [...state.messages.values()].map(view);
    return {
      ready: messages.filter((m) => m.state === 'ready').length,
      outstanding: messages.filter((m) => m.state === 'outstanding').length,
      acked: messages.filter((m) => m.state === 'acked').length,
      streams: state.streams.size,
      messages,
    };
  }

  // -------------------------------------------------------------------------------------
  // Publisher
  // -------------------------------------------------------------------------------------

  private publisherHandlers(): UntypedServiceImplementation {
    return {
      CreateTopic: unary((topic: Record<string, unknown>) => this.createTopic(topic)),
      GetTopic: unary((req: { topic?: string }) => this.topicResource(this.requireTopic(req.topic))),
      UpdateTopic: unary((req: { topic?: Record<string, unknown>; updateMask?: { paths?: string[] } }) =>
        this.updateTopic(req),
      ),
      ListTopics: unary((req: { project?: string; pageSize?: number; pageToken?: string }) => {
        const project = parseProjectName(req.project);
        const names = [...this.topics.keys()]
          .filter((name) => name.startsWith(`projects/${project}/`))
          .sort();
        const { page, nextPageToken } = paginate(names, req.pageSize, req.pageToken);
        return { topics: page.map((name) => this.topicResource(this.topics.get(name)!)), nextPageToken };
      }),
      ListTopicSubscriptions: unary((req: { topic?: string; pageSize?: number; pageToken?: string }) => {
        const topic = this.requireTopic(req.topic);
        const { page, nextPageToken } = paginate(
          [...topic.subscriptions].sort(),
          req.pageSize,
          req.pageToken,
        );
        return { subscriptions: page, nextPageToken };
      }),
      DeleteTopic: unary((req: { topic?: string }) => {
        const topic = this.requireTopic(req.topic);
        this.topics.delete(topic.name);
        // The service keeps the subscriptions; they point at `_deleted-topic_` and get no
        // new messages.
        for (const name of topic.subscriptions) {
          const subscription = this.subscriptions.get(name);
          if (subscription) subscription.config.topic = DELETED_TOPIC;
        }
        return {};
      }),
      DetachSubscription: unary((req: { subscription?: string }) => {
        const subscription = this.requireSubscription(req.subscription);
        subscription.config.detached = true;
        this.topics.get(subscription.config.topic)?.subscriptions.delete(subscription.name);
        for (const entry of subscription.messages.values()) this.forget(entry);
        subscription.messages.clear();
        subscription.keyBatches.clear();
        for (const stream of [...subscription.streams]) {
          this.endStream(stream, failedPrecondition('The subscription is detached.'));
        }
        return {};
      }),
      Publish: unary((req: { topic?: string; messages?: PubsubMessageValue[] }) => this.publish(req)),
    };
  }

  private createTopic(resource: Record<string, unknown>): Record<string, unknown> {
    const name = resource.name as string;
    parseTopicName(name);
    if (this.topics.has(name)) throw alreadyExists(name);
    const retention = durationToMs(resource.messageRetentionDuration as DurationValue | undefined);
    if (retention !== undefined && (retention < MIN_RETENTION_MS || retention > MAX_TOPIC_RETENTION_MS)) {
      throw invalidArgument('Invalid message_retention_duration: must be between 10 minutes and 31 days.');
    }
    const topic: TopicState = { name, resource: { ...resource }, subscriptions: new Set() };
    this.topics.set(name, topic);
    return this.topicResource(topic);
  }

  private updateTopic(req: { topic?: Record<string, unknown>; updateMask?: { paths?: string[] } }) {
    const topic = this.requireTopic(req.topic?.name as string | undefined);
    const paths = req.updateMask?.paths ?? [];
    if (paths.length === 0) throw invalidArgument('The update_mask in the UpdateTopicRequest must be set.');
    for (const path of paths) {
      const field = camel(path);
      if (!['labels', 'messageRetentionDuration', 'messageStoragePolicy', 'schemaSettings'].includes(field)) {
        throw invalidArgument(`Invalid update_mask provided in the UpdateTopicRequest: ${path}`);
      }
      topic.resource[field] = req.topic?.[field];
    }
    return this.topicResource(topic);
  }

  private topicResource(topic: TopicState): Record<string, unknown> {
    return { ...topic.resource, name: topic.name, state: 'ACTIVE' };
  }

  private publish(req: { topic?: string; messages?: PubsubMessageValue[] }): { messageIds: string[] } {
    const topic = this.requireTopic(req.topic);
    const messages = req.messages ?? [];
    if (messages.length === 0) throw invalidArgument('The request contains no messages.');
    if (messages.length > MAX_MESSAGES_PER_PUBLISH) {
      throw invalidArgument(
        `The request contains ${messages.length} messages; at most ${MAX_MESSAGES_PER_PUBLISH} are allowed.`,
      );
    }
    let requestBytes = 0;
    for (const message of messages) {
      const data = message.data ?? Buffer.alloc(0);
      const attributes = message.attributes ?? {};
      if (data.length === 0 && Object.keys(attributes).length === 0) {
        throw invalidArgument('Some messages are empty: a message needs data or at least one attribute.');
      }
      if (Object.keys(attributes).length > MAX_ATTRIBUTES) {
        throw invalidArgument(
          `A message has ${Object.keys(attributes).length} attributes; at most ${MAX_ATTRIBUTES} are allowed.`,
        );
      }
      for (const [key, value] of Object.entries(attributes)) {
        if (key === '' || Buffer.byteLength(key) > MAX_ATTRIBUTE_KEY_BYTES) {
          throw invalidArgument(`Invalid attribute key: "${key}".`);
        }
        if (Buffer.byteLength(value) > MAX_ATTRIBUTE_VALUE_BYTES) {
          throw invalidArgument(`The value of attribute "${key}" is longer than 1024 bytes.`);
        }
      }
      if (Buffer.byteLength(message.orderingKey ?? '') > MAX_ORDERING_KEY_BYTES) {
        throw invalidArgument('An ordering key is longer than 1024 bytes.');
      }
      const size = messageSize(data, attributes, message.orderingKey ?? '');
      if (size > MAX_MESSAGE_BYTES) {
        throw invalidArgument(`A message is ${size} bytes; at most ${MAX_MESSAGE_BYTES} are allowed.`);
      }
      requestBytes += size;
    }
    if (requestBytes > MAX_PUBLISH_REQUEST_BYTES) {
      throw invalidArgument('The request is larger than the 10 MB limit.');
    }
    return { messageIds: messages.map((message) => this.append(topic, message)) };
  }

  /** Stores one message on the topic's subscriptions; returns its new message ID. */
  private append(topic: TopicState, message: PubsubMessageValue): string {
    const messageId = String(++this.messageCounter);
    const data = message.data ?? Buffer.alloc(0);
    const attributes = { ...(message.attributes ?? {}) };
    const orderingKey = message.orderingKey ?? '';
    const stored: StoredMessage = {
      messageId,
      data,
      attributes,
      orderingKey,
      publishTimeMs: this.now(),
      size: messageSize(data, attributes, orderingKey),
    };
    for (const name of topic.subscriptions) {
      const subscription = this.subscriptions.get(name);
      if (!subscription || subscription.config.detached) continue;
      const seq = subscription.nextSeq++;
      subscription.messages.set(seq, {
        seq,
        message: stored,
        state: 'ready',
        deliveries: 0,
        availableAt: 0,
        ackId: undefined,
        deadline: 0,
        holder: undefined,
      });
      // Deliver on the next turn so that a batch of publishes lands in one response.
      queueMicrotask(() => this.pump(subscription));
    }
    return messageId;
  }

  // -------------------------------------------------------------------------------------
  // Subscriber
  // -------------------------------------------------------------------------------------

  private subscriberHandlers(): UntypedServiceImplementation {
    return {
      CreateSubscription: unary((resource: SubscriptionConfig) => this.createSubscription(resource)),
      GetSubscription: unary((req: { subscription?: string }) =>
        this.subscriptionResource(this.requireSubscription(req.subscription)),
      ),
      UpdateSubscription: unary(
        (req: { subscription?: SubscriptionConfig; updateMask?: { paths?: string[] } }) =>
          this.updateSubscription(req),
      ),
      ListSubscriptions: unary((req: { project?: string; pageSize?: number; pageToken?: string }) => {
        const project = parseProjectName(req.project);
        const names = [...this.subscriptions.keys()]
          .filter((name) => name.startsWith(`projects/${project}/`))
          .sort();
        const { page, nextPageToken } = paginate(names, req.pageSize, req.pageToken);
        return {
          subscriptions: page.map((name) => this.subscriptionResource(this.subscriptions.get(name)!)),
          nextPageToken,
        };
      }),
      DeleteSubscription: unary((req: { subscription?: string }) => {
        const subscription = this.requireSubscription(req.subscription);
        this.subscriptions.delete(subscription.name);
        this.topics.get(subscription.config.topic)?.subscriptions.delete(subscription.name);
        for (const entry of subscription.messages.values()) this.forget(entry);
        for (const stream of [...subscription.streams]) this.endStream(stream, notFound(subscription.name));
        for (const waiter of subscription.pullWaiters) waiter.deliver([]);
        return {};
      }),
      ModifyAckDeadline: unary(
        (req: { subscription?: string; ackIds?: string[]; ackDeadlineSeconds?: number }) => {
          const subscription = this.requireSubscription(req.subscription);
          const seconds = req.ackDeadlineSeconds ?? 0;
          if (seconds < 0 || seconds > MAX_ACK_DEADLINE_S) {
            throw invalidArgument(`Invalid ack deadline: ${seconds}; must be between 0 and 600 seconds.`);
          }
          if (!req.ackIds?.length) throw invalidArgument('No ack IDs were given.');
          const fault = this.faults.check('ModifyAckDeadline', subscription.name, req.ackIds, seconds);
          if (fault) throw fault;
          const errors = this.modifyAckDeadline(subscription, req.ackIds, seconds);
          if (errors.count > 0) throw errors.toError('modify ack deadline');
          return {};
        },
      ),
      Acknowledge: unary((req: { subscription?: string; ackIds?: string[] }) => {
        const subscription = this.requireSubscription(req.subscription);
        if (!req.ackIds?.length) throw invalidArgument('No ack IDs were given.');
        const fault = this.faults.check('Acknowledge', subscription.name, req.ackIds);
        if (fault) throw fault;
        const errors = this.acknowledge(subscription, req.ackIds);
        if (errors.count > 0) throw errors.toError('acknowledge');
        return {};
      }),
      Pull: (
        call: ServerUnaryCall<
          { subscription?: string; maxMessages?: number; returnImmediately?: boolean },
          unknown
        >,
        callback: sendUnaryData<unknown>,
      ) => {
        try {
          this.pull(call, callback);
        } catch (error) {
          callback(error as ApiError);
        }
      },
      StreamingPull: (call: ServerDuplexStream<any, any>) => this.streamingPull(call),
      ModifyPushConfig: unary((req: { subscription?: string; pushConfig?: unknown }) => {
        const subscription = this.requireSubscription(req.subscription);
        subscription.config = { ...subscription.config, pushConfig: pushConfigOf(req.pushConfig) };
        this.refusePullIfPush(subscription);
        return {};
      }),
    };
  }

  private createSubscription(resource: SubscriptionConfig): Record<string, unknown> {
    parseSubscriptionName(resource.name);
    parseTopicName(resource.topic);
    if (this.subscriptions.has(resource.name)) throw alreadyExists(resource.name);
    const topic = this.topics.get(resource.topic);
    if (!topic) throw notFound(resource.topic);
    if (resource.filter) throw new ApiError(status.UNIMPLEMENTED, 'Subscription filters are not emulated.');
    const config: SubscriptionConfig = {
      ...resource,
      ackDeadlineSeconds: 0,
      messageRetentionDuration: msToDuration(MAX_SUBSCRIPTION_RETENTION_MS),
    };
    this.applySubscriptionFields(config, resource, [
      'ackDeadlineSeconds',
      'messageRetentionDuration',
      'deadLetterPolicy',
      'retryPolicy',
      'pushConfig',
    ]);
    const state: SubscriptionState = {
      name: resource.name,
      config,
      messages: new Map(),
      nextSeq: 0,
      keyBatches: new Map(),
      streams: new Set(),
      pullWaiters: new Set(),
      cursor: 0,
    };
    this.subscriptions.set(resource.name, state);
    topic.subscriptions.add(resource.name);
    return this.subscriptionResource(state);
  }

  /** Validates and copies `fields` of `from` into `config` (create and update share the rules). */
  private applySubscriptionFields(config: SubscriptionConfig, from: SubscriptionConfig, fields: string[]) {
    for (const field of fields) {
      switch (field) {
        case 'ackDeadlineSeconds': {
          const seconds = from.ackDeadlineSeconds || DEFAULT_ACK_DEADLINE_S;
          if (seconds < this.minAckDeadlineS || seconds > MAX_ACK_DEADLINE_S) {
            throw invalidArgument(
              `Invalid ack_deadline_seconds: ${seconds}; must be between ${this.minAckDeadlineS} and 600.`,
            );
          }
          config.ackDeadlineSeconds = seconds;
          break;
        }
        case 'messageRetentionDuration': {
          const ms = durationToMs(from.messageRetentionDuration) ?? MAX_SUBSCRIPTION_RETENTION_MS;
          if (ms < MIN_RETENTION_MS || ms > MAX_SUBSCRIPTION_RETENTION_MS) {
            throw invalidArgument(
              'Invalid message_retention_duration: must be between 10 minutes and 7 days.',
            );
          }
          config.messageRetentionDuration = msToDuration(ms);
          break;
        }
        case 'deadLetterPolicy': {
          const policy = from.deadLetterPolicy;
          if (!policy?.deadLetterTopic) {
            delete config.deadLetterPolicy;
            break;
          }
          parseTopicName(policy.deadLetterTopic);
          const attempts = policy.maxDeliveryAttempts || DEFAULT_MAX_DELIVERY_ATTEMPTS;
          if (attempts < 5 || attempts > 100) {
            throw invalidArgument('Invalid max_delivery_attempts: must be between 5 and 100.');
          }
          config.deadLetterPolicy = {
            deadLetterTopic: policy.deadLetterTopic,
            maxDeliveryAttempts: attempts,
          };
          break;
        }
        case 'retryPolicy': {
          const policy = from.retryPolicy;
          if (!policy) {
            delete config.retryPolicy;
            break;
          }
          const min = durationToMs(policy.minimumBackoff) ?? DEFAULT_MIN_BACKOFF_MS;
          const max = durationToMs(policy.maximumBackoff) ?? DEFAULT_MAX_BACKOFF_MS;
          if (min < 0 || max > MAX_BACKOFF_MS || min > max) {
            throw invalidArgument('Invalid retry_policy: backoffs must be 0–600 s with minimum <= maximum.');
          }
          config.retryPolicy = { minimumBackoff: msToDuration(min), maximumBackoff: msToDuration(max) };
          break;
        }
        case 'pushConfig':
          config.pushConfig = pushConfigOf(from.pushConfig);
          break;
        default:
          config[field] = from[field];
      }
    }
  }

  private updateSubscription(req: { subscription?: SubscriptionConfig; updateMask?: { paths?: string[] } }) {
    const subscription = this.requireSubscription(req.subscription?.name);
    const paths = req.updateMask?.paths ?? [];
    if (paths.length === 0)
      throw invalidArgument('The update_mask in the UpdateSubscriptionRequest must be set.');
    const mutable = [
      'ackDeadlineSeconds',
      'retainAckedMessages',
      'messageRetentionDuration',
      'labels',
      'expirationPolicy',
      'deadLetterPolicy',
      'retryPolicy',
      'enableExactlyOnceDelivery',
      'pushConfig',
    ];
    const fields = paths.map(camel);
    for (const [i, field] of fields.entries()) {
      if (!mutable.includes(field)) {
        throw invalidArgument(`Invalid update_mask provided in the UpdateSubscriptionRequest: ${paths[i]}`);
      }
    }
    const next = { ...subscription.config };
    this.applySubscriptionFields(next, req.subscription!, fields);
    subscription.config = next;
    this.refusePullIfPush(subscription);
    return this.subscriptionResource(subscription);
  }

  /**
   * The service refuses to be pulled from a push subscription: a subscription made push
   * ends its open streams and waiting Pulls with what a new one would get.
   */
  private refusePullIfPush(subscription: SubscriptionState) {
    if (!isPush(subscription.config)) return;
    for (const stream of [...subscription.streams])
      this.endStream(stream, failedPrecondition(PUSH_NOT_PULLABLE));
    for (const waiter of subscription.pullWaiters) waiter.deliver([]);
  }

  private subscriptionResource(subscription: SubscriptionState): Record<string, unknown> {
    const topic = this.topics.get(subscription.config.topic);
    return {
      ...subscription.config,
      state: 'ACTIVE',
      ...(topic?.resource.messageRetentionDuration
        ? { topicMessageRetentionDuration: topic.resource.messageRetentionDuration }
        : {}),
    };
  }

  private pull(
    call: ServerUnaryCall<
      { subscription?: string; maxMessages?: number; returnImmediately?: boolean },
      unknown
    >,
    callback: sendUnaryData<unknown>,
  ) {
    const req = call.request;
    const subscription = this.requireSubscription(req.subscription);
    if (subscription.config.detached) throw failedPrecondition('The subscription is detached.');
    if (isPush(subscription.config)) throw failedPrecondition(PUSH_NOT_PULLABLE);
    if (!req.maxMessages || req.maxMessages <= 0) throw invalidArgument('max_messages must be positive.');
    let done = false;
    const waiter: PullWaiter = {
      maxMessages: req.maxMessages,
      outstanding: new Set(),
      outstandingBytes: 0,
      deliver: (receivedMessages) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        subscription.pullWaiters.delete(waiter);
        callback(null, { receivedMessages });
      },
    };
    const timer = setTimeout(() => waiter.deliver([]), req.returnImmediately ? 0 : this.pullWaitMs);
    call.on('cancelled', () => {
      done = true;
      clearTimeout(timer);
      subscription.pullWaiters.delete(waiter);
    });
    subscription.pullWaiters.add(waiter);
    this.pump(subscription);
  }

  private streamingPull(call: ServerDuplexStream<any, any>) {
    let stream: StreamState | undefined;
    call.on('data', (req: StreamingPullRequest) => {
      try {
        if (!stream) {
          stream = this.openStream(call, req);
          return;
        }
        if (req.subscription) throw invalidArgument('subscription may only be set on the first request.');
        this.applyStreamRequest(stream, req);
      } catch (error) {
        if (stream) this.endStream(stream, error as ApiError);
        else call.emit('error', error);
      }
    });
    // The client half-closes when it stops; finish the call so it sees a clean status.
    call.on('end', () => {
      if (stream) this.endStream(stream);
      else call.end();
    });
    call.on('cancelled', () => {
      if (stream) this.closeStream(stream);
    });
    call.on('error', () => {
      if (stream) this.closeStream(stream);
    });
  }

  private openStream(call: ServerDuplexStream<any, any>, req: StreamingPullRequest): StreamState {
    const subscription = this.requireSubscription(req.subscription);
    if (subscription.config.detached) throw failedPrecondition('The subscription is detached.');
    if (isPush(subscription.config)) throw failedPrecondition(PUSH_NOT_PULLABLE);
    const seconds = req.streamAckDeadlineSeconds ?? 0;
    if (seconds < this.minAckDeadlineS || seconds > MAX_ACK_DEADLINE_S) {
      throw invalidArgument(
        `Invalid stream_ack_deadline_seconds: ${seconds}; must be between ${this.minAckDeadlineS} and 600.`,
      );
    }
    const stream: StreamState = {
      call,
      subscription,
      ackDeadlineSeconds: seconds,
      maxMessages: Number(req.maxOutstandingMessages ?? 0),
      maxBytes: Number(req.maxOutstandingBytes ?? 0),
      outstanding: new Set(),
      outstandingBytes: 0,
      closed: false,
      timer: setTimeout(() => {
        // The service ends every stream after a while; UNAVAILABLE is what the client
        // retries (pull-retry.js), so it reopens the stream.
        this.endStream(
          stream,
          new ApiError(status.UNAVAILABLE, 'The service was unable to fulfill your request.'),
        );
      }, this.streamTimeoutMs),
    };
    stream.timer.unref();
    subscription.streams.add(stream);
    this.log(`stream opened on ${subscription.name}`);
    this.applyStreamRequest(stream, req);
    // Tell the client the subscription's properties at once (exactly-once changes the
    // client's minimum ack deadline and its receipt modAck handling).
    call.write({ receivedMessages: [], subscriptionProperties: this.properties(subscription) });
    this.pump(subscription);
    return stream;
  }

  private applyStreamRequest(stream: StreamState, req: StreamingPullRequest) {
    const subscription = stream.subscription;
    if (req.ackIds?.length) this.acknowledge(subscription, req.ackIds);
    const modIds = req.modifyDeadlineAckIds ?? [];
    const modSeconds = req.modifyDeadlineSeconds ?? [];
    if (modIds.length !== modSeconds.length) {
      throw invalidArgument('modify_deadline_ack_ids and modify_deadline_seconds must have the same length.');
    }
    modIds.forEach((ackId, i) => {
      this.modifyAckDeadline(subscription, [ackId], modSeconds[i]!);
    });
    if (req.streamAckDeadlineSeconds && stream.subscription.streams.has(stream)) {
      const seconds = req.streamAckDeadlineSeconds;
      if (seconds < this.minAckDeadlineS || seconds > MAX_ACK_DEADLINE_S) {
        throw invalidArgument(`Invalid stream_ack_deadline_seconds: ${seconds}.`);
      }
      stream.ackDeadlineSeconds = seconds;
    }
    if (req.maxOutstandingMessages !== undefined) stream.maxMessages = Number(req.maxOutstandingMessages);
    if (req.maxOutstandingBytes !== undefined) stream.maxBytes = Number(req.maxOutstandingBytes);
  }

  /** Ends a stream from the server side with `error`'s status, or OK. */
  private endStream(stream: StreamState, error?: ApiError) {
    if (stream.closed) return;
    this.closeStream(stream);
    try {
      if (error) stream.call.emit('error', error);
      else stream.call.end();
    } catch {
      // The call may already be gone (cancelled by the client).
    }
  }

  /**
   * Forgets a stream. Its messages keep their leases (their ack IDs stay valid until the
   * deadline), as on the service: only flow control is released.
   */
  private closeStream(stream: StreamState) {
    if (stream.closed) return;
    stream.closed = true;
    clearTimeout(stream.timer);
    stream.subscription.streams.delete(stream);
    for (const entry of stream.outstanding) entry.holder = undefined;
    stream.outstanding.clear();
    stream.outstandingBytes = 0;
    this.log(`stream closed on ${stream.subscription.name}`);
  }

  private properties(subscription: SubscriptionState) {
    return {
      exactlyOnceDeliveryEnabled: !!subscription.config.enableExactlyOnceDelivery,
      messageOrderingEnabled: !!subscription.config.enableMessageOrdering,
    };
  }

  // -------------------------------------------------------------------------------------
  // Leases
  // -------------------------------------------------------------------------------------

  /**
   * The entry an ack ID stands for, if it is still the message's latest ack ID and the
   * message is out. A deadline that passed but whose expiry the tick has not processed
   * yet does not invalidate it: the message has not gone out again, so an ack or modAck
   * that got here first is honoured (refusing it made an acked message come back).
   */
  private resolve(subscription: SubscriptionState, ackId: string): SubMessage | undefined {
    const found = this.ackIds.get(ackId);
    if (!found || found.subscription !== subscription) return undefined;
    const { entry } = found;
    if (entry.ackId !== ackId || entry.state !== 'outstanding') return undefined;
    return entry;
  }

  private acknowledge(subscription: SubscriptionState, ackIds: readonly string[]): ErrorCollector {
    const errors = new ErrorCollector();
    const exactlyOnce = !!subscription.config.enableExactlyOnceDelivery;
    for (const ackId of ackIds) {
      const entry = this.resolve(subscription, ackId);
      if (!entry) {
        // Without exactly-once a stale ack is silently ignored, as on the service.
        if (exactlyOnce) errors.add(ackId);
        continue;
      }
      this.ack(subscription, entry);
    }
    this.pump(subscription);
    return errors;
  }

  private modifyAckDeadline(subscription: SubscriptionState, ackIds: readonly string[], seconds: number) {
    const errors = new ErrorCollector();
    const exactlyOnce = !!subscription.config.enableExactlyOnceDelivery;
    for (const ackId of ackIds) {
      const entry = this.resolve(subscription, ackId);
      if (!entry) {
        if (exactlyOnce) errors.add(ackId);
        continue;
      }
      if (seconds === 0) this.redeliverOrDeadLetter(subscription, entry);
      else entry.deadline = this.now() + seconds * 1000;
    }
    this.pump(subscription);
    return errors;
  }

  private release(entry: SubMessage) {
    if (entry.ackId) this.ackIds.delete(entry.ackId);
    entry.ackId = undefined;
    const holder = entry.holder;
    if (holder?.outstanding.delete(entry)) holder.outstandingBytes -= entry.message.size;
    entry.holder = undefined;
  }

  private forget(entry: SubMessage) {
    this.release(entry);
  }

  private ack(subscription: SubscriptionState, entry: SubMessage) {
    this.release(entry);
    const key = entry.message.orderingKey;
    const batch = key ? subscription.keyBatches.get(key) : undefined;
    if (batch?.includes(entry)) {
      // Held until the key's batch is settled: a nack of an earlier message brings the
      // later ones back even though they were acked (ordering docs).
      entry.state = 'acked';
      this.settleBatch(subscription, key);
      return;
    }
    this.remove(subscription, entry);
  }

  private remove(subscription: SubscriptionState, entry: SubMessage) {
    this.release(entry);
    subscription.messages.delete(entry.seq);
  }

  /** Drops the acked messages of a key once none of its batch is outstanding. */
  private settleBatch(subscription: SubscriptionState, key: string) {
    const batch = subscription.keyBatches.get(key);
    if (!batch) return;
    if (batch.some((entry) => entry.state === 'outstanding')) return;
    subscription.keyBatches.delete(key);
    for (const entry of batch) if (entry.state === 'acked') this.remove(subscription, entry);
  }

  /** A nack or an expired deadline: back to ready after the retry backoff, or dead-lettered. */
  private redeliverOrDeadLetter(subscription: SubscriptionState, entry: SubMessage) {
    const now = this.now();
    const policy = subscription.config.deadLetterPolicy;
    const key = entry.message.orderingKey;
    const batch = key ? subscription.keyBatches.get(key) : undefined;
    if (batch?.includes(entry)) {
      // Every later message of the key comes back too, acked or not (ordering docs).
      const from = batch.indexOf(entry);
      for (const later of batch.splice(from)) {
        if (later === entry) continue;
        this.release(later);
        later.state = 'ready';
      }
    }
    this.release(entry);
    if (
      policy?.deadLetterTopic &&
      entry.deliveries >= (policy.maxDeliveryAttempts ?? DEFAULT_MAX_DELIVERY_ATTEMPTS)
    ) {
      this.forwardToDeadLetter(subscription, entry, policy.deadLetterTopic);
      this.remove(subscription, entry);
    } else {
      entry.state = 'ready';
      entry.availableAt = now + this.backoffMs(subscription, entry.deliveries);
    }
    if (key) this.settleBatch(subscription, key);
  }

  private backoffMs(subscription: SubscriptionState, deliveries: number): number {
    const policy = subscription.config.retryPolicy;
    if (!policy) return 0;
    const min = durationToMs(policy.minimumBackoff) ?? DEFAULT_MIN_BACKOFF_MS;
    const max = durationToMs(policy.maximumBackoff) ?? DEFAULT_MAX_BACKOFF_MS;
    return Math.min(max, min * 2 ** Math.max(0, deliveries - 1));
  }

  private forwardToDeadLetter(subscription: SubscriptionState, entry: SubMessage, topicName: string) {
    const topic = this.topics.get(topicName);
    if (!topic) {
      this.log(`dead-letter topic ${topicName} does not exist: message ${entry.message.messageId} dropped`);
      return;
    }
    const { project } = parseSubscriptionName(subscription.name);
    // The attributes the service adds to forwarded messages.
    this.append(topic, {
      data: entry.message.data,
      orderingKey: entry.message.orderingKey,
      attributes: {
        ...entry.message.attributes,
        CloudPubSubDeadLetterSourceDeliveryCount: String(entry.deliveries),
        CloudPubSubDeadLetterSourceSubscription: parseSubscriptionName(subscription.name).id,
        CloudPubSubDeadLetterSourceSubscriptionProject: project,
        CloudPubSubDeadLetterSourceTopicPublishTime: new Date(entry.message.publishTimeMs).toISOString(),
      },
    });
    this.log(`message ${entry.message.messageId} of ${subscription.name} forwarded to ${topicName}`);
  }

  private tick() {
    const now = this.now();
    for (const subscription of this.subscriptions.values()) {
      const retentionMs =
        durationToMs(subscription.config.messageRetentionDuration) ?? MAX_SUBSCRIPTION_RETENTION_MS;
      let due = false;
      for (const entry of [...subscription.messages.values()]) {
        if (entry.state === 'outstanding' && entry.deadline <= now) {
          this.redeliverOrDeadLetter(subscription, entry);
          due = true;
        } else if (entry.state === 'ready' && entry.message.publishTimeMs + retentionMs <= now) {
          this.remove(subscription, entry);
        } else if (entry.state === 'ready' && entry.availableAt <= now) {
          due = true;
        }
      }
      if (due) this.pump(subscription);
    }
  }

  /**
   * Hands ready messages to the subscription's streams (round-robin, within each
   * stream's flow control) and waiting Pulls. With ordering, a key's messages go out in
   * order, only while none of the key is out, all to one receiver.
   */
  private pump(subscription: SubscriptionState) {
    if (subscription.config.detached || !this.subscriptions.has(subscription.name)) return;
    if (isPush(subscription.config)) return;
    const receivers: Array<StreamState | PullWaiter> = [...subscription.streams, ...subscription.pullWaiters];
    if (receivers.length === 0) return;
    const now = this.now();
    const ordered = !!subscription.config.enableMessageOrdering;
    const batches = new Map<StreamState | PullWaiter, SubMessage[]>();
    /** Keys whose next message cannot go out in this pass. */
    const blocked = new Set<string>();
    /** Keys delivered in this pass, and to whom. */
    const keyReceiver = new Map<string, StreamState | PullWaiter>();
    const capacity = (receiver: StreamState | PullWaiter, size: number) => {
      const taken = batches.get(receiver)?.length ?? 0;
      if ('call' in receiver) {
        if (receiver.closed) return false;
        // Includes the messages leased in this pass (lease() adds them): counting `taken`
        // again sent a stream half its max_outstanding_messages.
        const count = receiver.outstanding.size;
        if (taken >= MAX_MESSAGES_PER_RESPONSE) return false;
        if (receiver.maxMessages > 0 && count >= receiver.maxMessages) return false;
        // A stream with nothing out always takes one message, however large.
        if (receiver.maxBytes > 0 && count > 0 && receiver.outstandingBytes + size > receiver.maxBytes)
          return false;
        return true;
      }
      return taken < receiver.maxMessages;
    };
    let start = subscription.cursor;
    for (const entry of subscription.messages.values()) {
      const key = ordered ? entry.message.orderingKey : '';
      if (entry.state !== 'ready' || entry.availableAt > now) {
        if (key && entry.state !== 'acked') blocked.add(key);
        continue;
      }
      let receiver: StreamState | PullWaiter | undefined;
      if (key) {
        if (blocked.has(key)) continue;
        const already = keyReceiver.get(key);
        if (already) {
          receiver = capacity(already, entry.message.size) ? already : undefined;
        } else if (!subscription.keyBatches.has(key)) {
          receiver = this.pick(receivers, start, (r) => capacity(r, entry.message.size));
        }
        if (!receiver) {
          blocked.add(key);
          continue;
        }
        keyReceiver.set(key, receiver);
      } else {
        receiver = this.pick(receivers, start, (r) => capacity(r, entry.message.size));
        if (!receiver) {
          if (!ordered) break;
          continue;
        }
      }
      start++;
      const list = batches.get(receiver) ?? [];
      list.push(entry);
      batches.set(receiver, list);
      this.lease(subscription, entry, receiver, now);
      if (key) {
        const batch = subscription.keyBatches.get(key) ?? [];
        batch.push(entry);
        subscription.keyBatches.set(key, batch);
      }
    }
    subscription.cursor = start;
    for (const [receiver, entries] of batches) {
      const receivedMessages = entries.map((entry) => this.received(subscription, entry));
      if ('call' in receiver) {
        receiver.call.write({ receivedMessages, subscriptionProperties: this.properties(subscription) });
      } else {
        receiver.deliver(receivedMessages);
      }
    }
  }

  private pick(
    receivers: Array<StreamState | PullWaiter>,
    start: number,
    fits: (receiver: StreamState | PullWaiter) => boolean,
  ): StreamState | PullWaiter | undefined {
    for (let i = 0; i < receivers.length; i++) {
      const receiver = receivers[(start + i) % receivers.length]!;
      if (fits(receiver)) return receiver;
    }
    return undefined;
  }

  /** One delivery: a fresh ack ID every time, the deadline of the stream (or subscription). */
  private lease(
    subscription: SubscriptionState,
    entry: SubMessage,
    receiver: StreamState | PullWaiter,
    now: number,
  ) {
    entry.deliveries++;
    entry.state = 'outstanding';
    entry.ackId = `${randomBytes(18).toString('base64url')}-${entry.message.messageId}`;
    this.ackIds.set(entry.ackId, { subscription, entry });
    const seconds = 'call' in receiver ? receiver.ackDeadlineSeconds : subscription.config.ackDeadlineSeconds;
    entry.deadline = now + seconds * 1000;
    if ('call' in receiver) {
      entry.holder = receiver;
      receiver.outstanding.add(entry);
      receiver.outstandingBytes += entry.message.size;
    }
  }

  private received(subscription: SubscriptionState, entry: SubMessage) {
    const { message } = entry;
    return {
      ackId: entry.ackId,
      message: {
        data: message.data,
        attributes: message.attributes,
        messageId: message.messageId,
        publishTime: msToTimestamp(message.publishTimeMs),
        orderingKey: message.orderingKey,
      },
      // Only populated when the subscription has a dead-letter policy (pubsub.proto).
      deliveryAttempt: subscription.config.deadLetterPolicy ? entry.deliveries : 0,
    };
  }

  private requireTopic(name: string | undefined): TopicState {
    parseTopicName(name);
    const topic = this.topics.get(name!);
    if (!topic) throw notFound(name!);
    return topic;
  }

  private requireSubscription(name: string | undefined): SubscriptionState {
    parseSubscriptionName(name);
    const subscription = this.subscriptions.get(name!);
    if (!subscription) throw notFound(name!);
    return subscription;
  }
}

interface StreamingPullRequest {
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
const PUSH_NOT_PULLABLE = 'This method is not supported for push subscriptions.';

/** A push subscription: its push config names an endpoint. */
function isPush(config: SubscriptionConfig): boolean {
  return !!(config.pushConfig as { pushEndpoint?: string } | undefined)?.pushEndpoint;
}

function view(entry: SubMessage): EmulatedMessageView {
  return {
    messageId: entry.message.messageId,
    attributes: entry.message.attributes,
    orderingKey: entry.message.orderingKey,
    data: entry.message.data,
    state: entry.state,
    deliveries: entry.deliveries,
    ...(entry.ackId ? { ackId: entry.ackId } : {}),
    ...(entry.state === 'outstanding' ? { deadline: entry.deadline } : {}),
  };
}

function messageSize(data: Buffer, attributes: Record<string, string>, orderingKey: string): number {
  let size = data.length + Buffer.byteLength(orderingKey);
  for (const [key, value] of Object.entries(attributes))
    size += Buffer.byteLength(key) + Buffer.byteLength(value);
  return size;
}

function camel(path: string): string {
  return path.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function paginate(names: string[], pageSize: number | undefined, pageToken: string | undefined) {
  const offset = pageToken ? Number(pageToken) : 0;
  if (!Number.isInteger(offset) || offset < 0) throw invalidArgument('Invalid page token.');
  const size = pageSize && pageSize > 0 ? pageSize : names.length;
  const page = names.slice(offset, offset + size);
  const next = offset + size < names.length ? String(offset + size) : '';
  return { page, nextPageToken: next };
}

/** A unary handler whose `ApiError`s become the call's status (and trailers). */
function unary<Req>(handle: (request: Req) => unknown) {
  return (call: ServerUnaryCall<Req, unknown>, callback: sendUnaryData<unknown>) => {
    try {
      callback(null, handle(call.request));
    } catch (error) {
      if (error instanceof ApiError) callback(error);
      else callback(new ApiError(status.INTERNAL, String(error)));
    }
  };
}

/**
 * Starts the Pub/Sub emulator in this process and resolves once it listens (a few tens
 * of milliseconds). Point the client at `emulator.address`, with `PUBSUB_EMULATOR_HOST`
 * or per instance.
 *
 * @example
 * ```ts
 * import { PubSub } from '@google-cloud/pubsub';
 * import { startPubSubEmulator } from '@oncely/emulators/pubsub';
 *
 * const emulator = await startPubSubEmulator({ port: 0, minAckDeadlineSeconds: 1 });
 * const pubsub = new PubSub({ projectId: 'test', apiEndpoint: emulator.address, emulatorMode: true });
 * const [topic] = await pubsub.createTopic('orders');
 * await emulator.stop();
 * ```
 */
export async function startPubSubEmulator(options: PubSubEmulatorOptions = {}): Promise<PubSubEmulator> {
  const emulator = new PubSubEmulatorImpl(options);
  await emulator.listen();
  return emulator;
}
