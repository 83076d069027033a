/**
 * The namespace's entities: queues, topics and their subscriptions (created from the config
 * or at run time, deleted), how an address resolves to an entity, and what a sent message
 * becomes in them (duplicate detection, subscription rules, scheduling, sessions).
 */
import { randomUUID } from 'node:crypto';
import {
  type EntitySettings,
  type QueueProperties,
  queueSettings,
  type RuleConfig,
  type TopicProperties,
} from './config.js';
import { type AmqpMessage, type EntityHooks, MessageEntity, type SessionRecord } from './MessageEntity.js';
import {
  CONDITIONS,
  type DuplicateHistory,
  ManagementError,
  type Outbound,
  type Subscription,
  scheduledTimeOf,
  stripAddress,
  type Topic,
} from './model.js';
import { copiesFor, defaultRule, ruleFromConfig } from './rules.js';

/** The namespace's queues, topics and subscriptions, and what a sent message becomes in them. */
export abstract class EntityRegistry {
  protected readonly queues = new Map<string, MessageEntity>();
  private readonly queueNames = new Map<string, string>();
  protected readonly topics = new Map<string, Topic>();
  private readonly duplicates = new Map<string, DuplicateHistory>();
  /** Scheduled sends to a topic: the topic's sequence number → the copies per subscription. */
  protected readonly topicSchedules = new Map<
    string,
    Map<number, Array<{ entity: MessageEntity; seq: number }>>
  >();
  private topicSeq = 1;
  protected readonly outbounds = new Map<MessageEntity, Set<Outbound>>();
  protected readonly hooks: EntityHooks = {
    wake: (entity) => this.schedulePump(entity),
    sessionLockLost: (entity, session) => this.onSessionLockLost(entity, session),
  };

  /** Queues a pump of `entity` (delivery.ts). */
  protected abstract schedulePump(entity: MessageEntity): void;
  /** Detaches the receivers of a session whose lock ran out (delivery.ts). */
  protected abstract onSessionLockLost(entity: MessageEntity, session: SessionRecord): void;
  /** Forgets a receiver link and releases its session (delivery.ts). */
  protected abstract closeOutbound(out: Outbound): void;

  /**
   * Creates a queue (run-time counterpart of `Config.json`'s `Queues`). Replaces nothing:
   * throws when it exists.
   *
   * @example
   * ```ts
   * emulator.createQueue('orders', { LockDuration: 'PT2S', MaxDeliveryCount: 3, RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: 'PT1M' });
   * ```
   */
  createQueue(name: string, properties: QueueProperties = {}): void {
    const key = name.toLowerCase();
    if (this.queues.has(key) || this.topics.has(key)) throw new Error(`entity ${name} already exists`);
    this.queues.set(key, new MessageEntity(name, queueSettings(properties, name), this.hooks));
    this.queueNames.set(key, name);
  }

  /** Creates a topic. */
  createTopic(name: string, properties: TopicProperties = {}): void {
    const key = name.toLowerCase();
    if (this.queues.has(key) || this.topics.has(key)) throw new Error(`entity ${name} already exists`);
    const settings = queueSettings(
      {
        DefaultMessageTimeToLive: properties.DefaultMessageTimeToLive,
        RequiresDuplicateDetection: properties.RequiresDuplicateDetection,
        DuplicateDetectionHistoryTimeWindow: properties.DuplicateDetectionHistoryTimeWindow,
      },
      name,
    );
    this.topics.set(key, {
      name,
      ttlMs: settings.defaultTtlMs,
      requiresDuplicateDetection: settings.requiresDuplicateDetection,
      duplicateDetectionWindowMs: settings.duplicateDetectionWindowMs,
      subscriptions: new Map(),
    });
  }

  /**
   * Creates a subscription. Without rules it gets the `$Default` rule (every message);
   * with rules, what they select (rules.ts): SQL or correlation filters, SQL actions.
   * A rule that does not parse throws, naming the rule.
   *
   * @example
   * ```ts
   * emulator.createSubscription('events', 'audit', { MaxDeliveryCount: 5 }, [
   *   { Name: 'orders-only', Properties: { FilterType: 'Correlation', CorrelationFilter: { Subject: 'order' } } },
   * ]);
   * ```
   */
  createSubscription(
    topicName: string,
    name: string,
    properties: QueueProperties = {},
    rules: RuleConfig[] = [],
  ): void {
    const topic = this.topics.get(topicName.toLowerCase());
    if (!topic) throw new Error(`topic ${topicName} does not exist`);
    if (topic.subscriptions.has(name.toLowerCase()))
      throw new Error(`subscription ${topicName}/${name} already exists`);
    const compiled = rules.length === 0 ? [defaultRule()] : rules.map(ruleFromConfig);
    const names = new Set<string>();
    for (const rule of compiled) {
      if (names.has(rule.name.toLowerCase())) throw new Error(`rule ${rule.name} is configured twice`);
      names.add(rule.name.toLowerCase());
    }
    const settings = queueSettings(properties, `${topicName}/${name}`);
    settings.defaultTtlMs = Math.min(settings.defaultTtlMs, topic.ttlMs);
    topic.subscriptions.set(name.toLowerCase(), {
      name,
      entity: new MessageEntity(`${topic.name}/Subscriptions/${name}`, settings, this.hooks),
      rules: compiled,
    });
  }

  /** Deletes a queue with its messages; links to it are closed. */
  deleteQueue(name: string): void {
    const entity = this.queues.get(name.toLowerCase());
    if (!entity) return;
    this.detachEntity(entity);
    this.queues.delete(name.toLowerCase());
  }

  /** Deletes a topic with its subscriptions. */
  deleteTopic(name: string): void {
    const topic = this.topics.get(name.toLowerCase());
    if (!topic) return;
    for (const sub of topic.subscriptions.values()) this.detachEntity(sub.entity);
    this.topics.delete(name.toLowerCase());
  }

  /** Deletes a subscription with its messages; links to it are closed. */
  deleteSubscription(topicName: string, name: string): void {
    const topic = this.topics.get(topicName.toLowerCase());
    const sub = topic?.subscriptions.get(name.toLowerCase());
    if (!topic || !sub) return;
    this.detachEntity(sub.entity);
    topic.subscriptions.delete(name.toLowerCase());
  }

  /** Names of the queues, as created. */
  queueList(): string[] {
    return [...this.queues.keys()].map((key) => this.queueNames.get(key) ?? key);
  }

  /** The topics, as created (settings and subscriptions), for the administration API. */
  topicList(): Topic[] {
    return [...this.topics.values()];
  }

  /** An entity's settings (queue or `topic/Subscriptions/name`), or undefined. */
  settingsOf(path: string): EntitySettings | undefined {
    return this.resolveEntity(path)?.settings;
  }

  private detachEntity(entity: MessageEntity): void {
    for (const candidate of [entity, entity.deadLetterQueue]) {
      if (!candidate) continue;
      for (const out of this.outbounds.get(candidate) ?? []) {
        // The service's wording: the client classifies a detach by it ("The messaging
        // entity ... could not be found" is MessagingEntityNotFound, not retried), and by
        // the condition alone amqp:not-found is a retryable ServiceCommunicationProblem.
        out.link.close({
          condition: CONDITIONS.entityNotFound,
          description: `The messaging entity '${candidate.path}' could not be found (it was deleted).`,
        });
        this.closeOutbound(out);
      }
    }
    entity.dispose();
  }

  protected allEntities(): MessageEntity[] {
    const list = [...this.queues.values()];
    for (const topic of this.topics.values())
      for (const sub of topic.subscriptions.values()) list.push(sub.entity);
    return list;
  }

  /** The subscription at `<topic>/Subscriptions/<sub>`, or undefined. */
  protected resolveSubscription(address: string): Subscription | undefined {
    const parts = stripAddress(address).split('/');
    if (parts.length !== 3 || parts[1]!.toLowerCase() !== 'subscriptions') return undefined;
    return this.topics.get(parts[0]!.toLowerCase())?.subscriptions.get(parts[2]!.toLowerCase());
  }

  /** Resolves `<queue>`, `<topic>/Subscriptions/<sub>` and their `/$DeadLetterQueue`. */
  protected resolveEntity(address: string): MessageEntity | undefined {
    let path = stripAddress(address);
    let deadLetter = false;
    if (/\/\$deadletterqueue$/i.test(path)) {
      deadLetter = true;
      path = path.slice(0, -'/$DeadLetterQueue'.length);
    }
    let entity: MessageEntity | undefined;
    const parts = path.split('/');
    if (parts.length === 1) entity = this.queues.get(path.toLowerCase());
    else if (parts.length === 3 && parts[1]!.toLowerCase() === 'subscriptions') {
      entity = this.topics.get(parts[0]!.toLowerCase())?.subscriptions.get(parts[2]!.toLowerCase())?.entity;
    }
    return deadLetter ? entity?.deadLetterQueue : entity;
  }

  /** Enqueues one message sent to a queue or topic; returns its sequence number (-1: duplicate dropped). */
  protected accept(address: string, message: AmqpMessage, scheduledAt?: number): number {
    const key = address.toLowerCase();
    // The service gives a message without a MessageId one of its own (a GUID in hex).
    if (message.message_id === undefined || message.message_id === null) {
      message.message_id = randomUUID().replaceAll('-', '');
    }
    const when = scheduledAt ?? scheduledTimeOf(message);
    const queue = this.queues.get(key);
    if (queue) {
      if (this.isDuplicate(key, message, queue.settings)) return -1;
      checkSession(queue, message);
      return queue.enqueue(message, { scheduledAt: when });
    }
    const topic = this.topics.get(key);
    if (!topic)
      throw new ManagementError(
        404,
        CONDITIONS.entityNotFound,
        `The messaging entity '${address}' could not be found.`,
      );
    if (this.isDuplicate(key, message, topic)) return -1;
    const copies: Array<{ entity: MessageEntity; seq: number }> = [];
    for (const sub of topic.subscriptions.values()) {
      for (const copy of copiesFor(sub.rules, message)) {
        checkSession(sub.entity, copy);
        copies.push({ entity: sub.entity, seq: sub.entity.enqueue(copy, { scheduledAt: when }) });
      }
    }
    const seq = this.topicSeq++;
    if (when !== undefined && when > Date.now()) {
      let schedules = this.topicSchedules.get(key);
      if (!schedules) {
        schedules = new Map();
        this.topicSchedules.set(key, schedules);
      }
      schedules.set(seq, copies);
    }
    return seq;
  }

  /**
   * Duplicate detection: a `MessageId` seen within the window is accepted and dropped.
   * Only the ID is compared, as by the service.
   */
  private isDuplicate(
    key: string,
    message: AmqpMessage,
    settings: { requiresDuplicateDetection: boolean; duplicateDetectionWindowMs: number },
  ): boolean {
    if (
      !settings.requiresDuplicateDetection ||
      message.message_id === undefined ||
      message.message_id === null
    ) {
      return false;
    }
    const id = idString(message.message_id);
    let history = this.duplicates.get(key);
    if (!history) {
      history = new Map();
      this.duplicates.set(key, history);
    }
    const now = Date.now();
    const until = history.get(id);
    if (until !== undefined && until > now) return true;
    if (history.size > 10_000) for (const [k, v] of history) if (v <= now) history.delete(k);
    history.set(id, now + settings.duplicateDetectionWindowMs);
    return false;
  }
}

function checkSession(entity: MessageEntity, message: AmqpMessage): void {
  if (entity.settings.requiresSession && typeof message.group_id !== 'string') {
    throw new ManagementError(
      400,
      CONDITIONS.argumentError,
      `The SessionId was not set on a message, and it cannot be sent to the entity '${entity.path}'. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.`,
    );
  }
}

function idString(id: unknown): string {
  if (Buffer.isBuffer(id)) return id.toString('hex');
  return String(id);
}
