import { Server, ServerCredentials, status } from '@grpc/grpc-js';
import { ApiError } from './apiError.js';
import type { SettlementFailure, SettlementFailureHandle } from './faults.js';
import { MAX_GRPC_MESSAGE_BYTES, view } from './model.js';
import { PublisherService } from './publisher.js';

// The layers, each a class on the one below: delivery.ts (state, leases, pump),
// entities.ts (topics and subscriptions), subscriber.ts (Pull, StreamingPull),
// publisher.ts (Publish); this file wires them to a gRPC server and adds the test controls.

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
  /** Not delivered before this time (epoch ms, retry backoff), while ready after a nack or expiry. */
  availableAt?: number;
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
// The emulator
// ---------------------------------------------------------------------------------------

class PubSubEmulatorImpl extends PublisherService implements PubSubEmulator {
  private server: Server | undefined;

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
