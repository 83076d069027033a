// The Subscriber service: its gRPC handlers, unary Pull, and StreamingPull (one stream's
// life: open, flow control and deadline updates, acks and modAcks on the stream).

import {
  type ServerDuplexStream,
  type ServerUnaryCall,
  type sendUnaryData,
  status,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { ApiError, failedPrecondition, invalidArgument, notFound } from './apiError.js';
import { EntityStore } from './entities.js';
import {
  isPush,
  MAX_ACK_DEADLINE_S,
  PUSH_NOT_PULLABLE,
  type PullWaiter,
  paginate,
  type StreamingPullRequest,
  type StreamState,
  type SubscriptionConfig,
  unary,
} from './model.js';
import { parseProjectName } from './names.js';
import { pushConfigOf } from './pushConfig.js';

export abstract class SubscriberService extends EntityStore {
  protected subscriberHandlers(): UntypedServiceImplementation {
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

  protected pull(
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

  protected streamingPull(call: ServerDuplexStream<any, any>) {
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

  protected openStream(call: ServerDuplexStream<any, any>, req: StreamingPullRequest): StreamState {
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

  protected applyStreamRequest(stream: StreamState, req: StreamingPullRequest) {
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
}
