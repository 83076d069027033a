// The delivery engine: the emulator's state, leases (ack, modAck, expiry), retry backoff,
// dead-lettering, ordering-key batches, and the pump that hands ready messages to
// streams and waiting Pulls. Every service layer builds on it.

import { randomBytes } from 'node:crypto';
import type { ApiError } from './apiError.js';
import { notFound } from './apiError.js';
import { SettlementFaults } from './faults.js';
import {
  type AckEntry,
  DEFAULT_ACK_DEADLINE_S,
  DEFAULT_MAX_BACKOFF_MS,
  DEFAULT_MAX_DELIVERY_ATTEMPTS,
  DEFAULT_MIN_BACKOFF_MS,
  ErrorCollector,
  isPush,
  MAX_MESSAGES_PER_RESPONSE,
  MAX_RESPONSE_BYTES,
  MAX_SUBSCRIPTION_RETENTION_MS,
  messageSize,
  type PubsubMessageValue,
  type PullWaiter,
  type StoredMessage,
  type StreamState,
  type SubMessage,
  type SubscriptionState,
  type TopicState,
} from './model.js';
import { durationToMs, msToTimestamp, parseSubscriptionName, parseTopicName } from './names.js';
import type { PubSubEmulatorOptions } from './PubSubEmulator.js';
import { loadPubSubServices, type PubSubServices } from './protos.js';

export abstract class DeliveryEngine {
  host: string;
  port: number;
  protected readonly services: PubSubServices;
  protected readonly topics = new Map<string, TopicState>();
  protected readonly subscriptions = new Map<string, SubscriptionState>();
  protected readonly ackIds = new Map<string, AckEntry>();
  protected readonly faults = new SettlementFaults();
  protected readonly minAckDeadlineS: number;
  protected readonly streamTimeoutMs: number;
  protected readonly pullWaitMs: number;
  protected readonly log: (line: string) => void;
  protected readonly ticker: NodeJS.Timeout;
  protected messageCounter = 0;
  protected readonly now: () => number;

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

  /** Stores one message on the topic's subscriptions; returns its new message ID. */
  protected append(topic: TopicState, message: PubsubMessageValue): string {
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
      // A filtered subscription never receives what its filter does not match (nor is it acked).
      if (subscription.matches && !subscription.matches(attributes)) continue;
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

  /** Ends a stream from the server side with `error`'s status, or OK. */
  protected endStream(stream: StreamState, error?: ApiError) {
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
  protected closeStream(stream: StreamState) {
    if (stream.closed) return;
    stream.closed = true;
    clearTimeout(stream.timer);
    stream.subscription.streams.delete(stream);
    for (const entry of stream.outstanding) entry.holder = undefined;
    stream.outstanding.clear();
    stream.outstandingBytes = 0;
    this.log(`stream closed on ${stream.subscription.name}`);
  }

  protected properties(subscription: SubscriptionState) {
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
  protected resolve(subscription: SubscriptionState, ackId: string): SubMessage | undefined {
    const found = this.ackIds.get(ackId);
    if (!found || found.subscription !== subscription) return undefined;
    const { entry } = found;
    if (entry.ackId !== ackId || entry.state !== 'outstanding') return undefined;
    return entry;
  }

  protected acknowledge(subscription: SubscriptionState, ackIds: readonly string[]): ErrorCollector {
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

  protected modifyAckDeadline(subscription: SubscriptionState, ackIds: readonly string[], seconds: number) {
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

  protected release(entry: SubMessage) {
    if (entry.ackId) this.ackIds.delete(entry.ackId);
    entry.ackId = undefined;
    const holder = entry.holder;
    if (holder?.outstanding.delete(entry)) holder.outstandingBytes -= entry.message.size;
    entry.holder = undefined;
  }

  protected forget(entry: SubMessage) {
    this.release(entry);
  }

  protected ack(subscription: SubscriptionState, entry: SubMessage) {
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

  protected remove(subscription: SubscriptionState, entry: SubMessage) {
    this.release(entry);
    subscription.messages.delete(entry.seq);
  }

  /** Drops the acked messages of a key once none of its batch is outstanding. */
  protected settleBatch(subscription: SubscriptionState, key: string) {
    const batch = subscription.keyBatches.get(key);
    if (!batch) return;
    if (batch.some((entry) => entry.state === 'outstanding')) return;
    subscription.keyBatches.delete(key);
    for (const entry of batch) if (entry.state === 'acked') this.remove(subscription, entry);
  }

  /** A nack or an expired deadline: back to ready after the retry backoff, or dead-lettered. */
  protected redeliverOrDeadLetter(subscription: SubscriptionState, entry: SubMessage) {
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

  protected backoffMs(subscription: SubscriptionState, deliveries: number): number {
    const policy = subscription.config.retryPolicy;
    if (!policy) return 0;
    const min = durationToMs(policy.minimumBackoff) ?? DEFAULT_MIN_BACKOFF_MS;
    const max = durationToMs(policy.maximumBackoff) ?? DEFAULT_MAX_BACKOFF_MS;
    return Math.min(max, min * 2 ** Math.max(0, deliveries - 1));
  }

  protected forwardToDeadLetter(subscription: SubscriptionState, entry: SubMessage, topicName: string) {
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

  protected tick() {
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
  protected pump(subscription: SubscriptionState) {
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
    /** Bytes of the messages in each receiver's response of this pass. */
    const batchBytes = new Map<StreamState | PullWaiter, number>();
    const capacity = (receiver: StreamState | PullWaiter, size: number) => {
      const taken = batches.get(receiver)?.length ?? 0;
      // The service splits what it sends into responses it can send: one response of
      // several 10 MB messages went over the gRPC send limit and failed the whole Pull
      // with RESOURCE_EXHAUSTED, its messages leased to nobody until their deadline.
      if (taken > 0 && (batchBytes.get(receiver) ?? 0) + size > MAX_RESPONSE_BYTES) return false;
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
      batchBytes.set(receiver, (batchBytes.get(receiver) ?? 0) + entry.message.size);
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

  protected pick(
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
  protected lease(
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

  protected received(subscription: SubscriptionState, entry: SubMessage) {
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

  protected requireTopic(name: string | undefined): TopicState {
    parseTopicName(name);
    const topic = this.topics.get(name!);
    if (!topic) throw notFound(name!);
    return topic;
  }

  protected requireSubscription(name: string | undefined): SubscriptionState {
    parseSubscriptionName(name);
    const subscription = this.subscriptions.get(name!);
    if (!subscription) throw notFound(name!);
    return subscription;
  }
}
