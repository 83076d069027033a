// Topics and subscriptions as resources: create, get, update and their validation (the
// service's limits on deadlines, retention, dead-letter and retry policies).

import { alreadyExists, failedPrecondition, invalidArgument, notFound } from './apiError.js';
import { DeliveryEngine } from './delivery.js';
import { compileFilter } from './filter.js';
import {
  camel,
  DEFAULT_ACK_DEADLINE_S,
  DEFAULT_MAX_BACKOFF_MS,
  DEFAULT_MAX_DELIVERY_ATTEMPTS,
  DEFAULT_MIN_BACKOFF_MS,
  isPush,
  MAX_ACK_DEADLINE_S,
  MAX_BACKOFF_MS,
  MAX_SUBSCRIPTION_RETENTION_MS,
  MAX_TOPIC_RETENTION_MS,
  MIN_RETENTION_MS,
  PUSH_NOT_PULLABLE,
  type SubscriptionConfig,
  type SubscriptionState,
  type TopicState,
} from './model.js';
import {
  type DurationValue,
  durationToMs,
  msToDuration,
  parseSubscriptionName,
  parseTopicName,
} from './names.js';
import { pushConfigOf } from './pushConfig.js';

export abstract class EntityStore extends DeliveryEngine {
  protected createTopic(resource: Record<string, unknown>): Record<string, unknown> {
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

  protected updateTopic(req: { topic?: Record<string, unknown>; updateMask?: { paths?: string[] } }) {
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

  protected topicResource(topic: TopicState): Record<string, unknown> {
    return { ...topic.resource, name: topic.name, state: 'ACTIVE' };
  }

  protected createSubscription(resource: SubscriptionConfig): Record<string, unknown> {
    parseSubscriptionName(resource.name);
    parseTopicName(resource.topic);
    if (this.subscriptions.has(resource.name)) throw alreadyExists(resource.name);
    const topic = this.topics.get(resource.topic);
    if (!topic) throw notFound(resource.topic);
    const matches = resource.filter ? compileFilter(resource.filter) : undefined;
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
      ...(matches ? { matches } : {}),
    };
    this.subscriptions.set(resource.name, state);
    topic.subscriptions.add(resource.name);
    return this.subscriptionResource(state);
  }

  /** Validates and copies `fields` of `from` into `config` (create and update share the rules). */
  protected applySubscriptionFields(config: SubscriptionConfig, from: SubscriptionConfig, fields: string[]) {
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

  protected updateSubscription(req: {
    subscription?: SubscriptionConfig;
    updateMask?: { paths?: string[] };
  }) {
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
  protected refusePullIfPush(subscription: SubscriptionState) {
    if (!isPush(subscription.config)) return;
    for (const stream of [...subscription.streams])
      this.endStream(stream, failedPrecondition(PUSH_NOT_PULLABLE));
    for (const waiter of subscription.pullWaiters) waiter.deliver([]);
  }

  protected subscriptionResource(subscription: SubscriptionState): Record<string, unknown> {
    const topic = this.topics.get(subscription.config.topic);
    return {
      ...subscription.config,
      state: 'ACTIVE',
      ...(topic?.resource.messageRetentionDuration
        ? { topicMessageRetentionDuration: topic.resource.messageRetentionDuration }
        : {}),
    };
  }
}
