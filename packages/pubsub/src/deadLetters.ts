import { PubSub, type protos, v1 } from '@google-cloud/pubsub';
import {
  BrokerMisconfiguredError,
  ConfigError,
  type ConsumerConfig,
  type DeadLetterSession,
  type HeldDeadLetter,
} from '@oncely/core';
import { DEAD_LETTER_ATTRIBUTES, readDeadLetter } from './deadLetterCopy.js';
import { parsePubSubConfig } from './pubsubConfig.js';
import { resolveProject } from './resolveProject.js';
import { notPullable, readSubscriptionFacts, type SubscriptionFacts } from './subscriptionFacts.js';

/**
 * The ack deadline a session holds its dead letters under, renewed every third of it while
 * the session is open. A process that dies mid-pass leaves them hidden this long at most.
 */
export const DEAD_LETTER_SESSION_LEASE_SECONDS = 60;
/** Messages asked for per Pull (the service's maximum is 1,000). */
const PULL_BATCH = 1000;
/** Ack IDs per Acknowledge/ModifyAckDeadline request: well under the 512 KB request limit. */
const IDS_PER_REQUEST = 500;
/**
 * How long the last Pull waits for more before the pass takes the subscription as read.
 * A Pull that returns nothing in this time ends the read (the service answers a Pull
 * without messages only after a wait of its own; gRPC DEADLINE_EXCEEDED means empty).
 */
const LAST_PULL_WAIT_MS = 3000;
const DEADLINE_EXCEEDED = 4;
/**
 * How long before its lease would end a session stops settling: an ack after the lease
 * ended is dropped silently (the letter stays and would be sent again), and a copy whose
 * lease ended may already be in another pass.
 */
const LEASE_MARGIN_MS = 10_000;
/** The attributes Pub/Sub's own dead-letter policy adds to what it forwards. */
const POLICY_ATTRIBUTES = [
  'CloudPubSubDeadLetterSourceDeliveryCount',
  'CloudPubSubDeadLetterSourceSubscription',
  'CloudPubSubDeadLetterSourceSubscriptionProject',
  'CloudPubSubDeadLetterSourceTopicPublishTime',
] as const;

type ReceivedMessage = protos.google.pubsub.v1.IReceivedMessage;

interface PubSubHeld extends HeldDeadLetter {
  /** The latest ack ID of this copy (a redelivery during the pass replaces it). */
  ackId: string;
  readonly copyId: string;
  /** What a replay publishes to the source topic. */
  readonly replayMessage: protos.google.pubsub.v1.IPubsubMessage;
  /** The subscription the copy names as its source: a full name (Oncely) or an ID (the policy). */
  readonly sourceSubscription?: string;
}

/**
 * Opens a pass over the consumer's dead letters for `DeadLetters` / `oncely dlq`. Pub/Sub
 * keeps them on the dead-letter topic (`broker.deadLetterTopic`, else the subscription's
 * dead-letter policy); they are read through `broker.deadLetterSubscription`, a pull
 * subscription on that topic.
 *
 * Strategy: `read()` pulls (unary Pull) until a Pull brings nothing, and holds every copy
 * under a {@link DEAD_LETTER_SESSION_LEASE_SECONDS} deadline renewed while the session is
 * open; `replay` publishes the original data, attributes (its `message-id` included, without
 * Oncely's and the dead-letter policy's attributes; attributes the copy had to fold away
 * restored) and ordering key to the topic of the consumer's subscription, and acks the copy
 * once the service returned the new message's ID; `remove` acks it; `close()` gives the rest
 * back (ModifyAckDeadline 0). Copies another subscription dead-lettered to a shared topic
 * are held back unlisted and given back at close.
 *
 * The replayed message gets a new Pub/Sub message ID: the `broker` ID strategy cannot
 * deduplicate a replay; the default `message-id` attribute (and `producer`) can.
 *
 * @example
 * ```ts
 * const session = await openDeadLetters({ name: 'payments', broker: { type: 'pubsub', subscription: 'payments', deadLetterSubscription: 'payments-dead-letters' }, store, handler });
 * ```
 */
export async function openDeadLetters(config: ConsumerConfig<any, any>): Promise<DeadLetterSession> {
  const settings = parsePubSubConfig(config.broker as unknown as Record<string, unknown>);
  if (settings.deadLetterSubscription === undefined) {
    throw new ConfigError(
      'broker.deadLetterSubscription',
      'is needed to read dead letters: a pull subscription on the dead-letter topic (Pub/Sub keeps dead letters on a topic, and a topic cannot be read)',
    );
  }
  const owned = settings.client === undefined;
  const pubsub =
    settings.client ??
    new PubSub({
      ...(settings.projectId ? { projectId: settings.projectId } : {}),
      ...(settings.apiEndpoint ? { apiEndpoint: settings.apiEndpoint } : {}),
    });
  try {
    // Resolves the project (PUBSUB_PROJECT_ID, the credentials): names below are then full
    // ones, which the generated clients and the copies' source attributes need.
    const clientOptions = await resolveProject(pubsub);
    const source = await readSubscriptionFacts(pubsub, pubsub.subscription(settings.subscription).name);
    const deadName = pubsub.subscription(settings.deadLetterSubscription).name;
    if (deadName === source.name) {
      throw new ConfigError('broker.deadLetterSubscription', 'must not be the consumer’s own subscription');
    }
    const dead = await readSubscriptionFacts(pubsub, deadName);
    checkDeadLetterSubscription(
      dead,
      source,
      settings.deadLetterTopic ?? source.deadLetterPolicy?.deadLetterTopic,
      pubsub,
    );
    return new PubSubDeadLetterSession(
      new v1.SubscriberClient(clientOptions as ConstructorParameters<typeof v1.SubscriberClient>[0]),
      new v1.PublisherClient(clientOptions as ConstructorParameters<typeof v1.PublisherClient>[0]),
      owned ? pubsub : undefined,
      source,
      dead.name,
    );
  } catch (error) {
    if (owned) await pubsub.close().catch(() => {});
    throw error;
  }
}

/** Refuses a dead-letter subscription a pass could not read whole, or that reads another topic. */
function checkDeadLetterSubscription(
  dead: SubscriptionFacts,
  source: SubscriptionFacts,
  topic: string | undefined,
  pubsub: PubSub,
) {
  const why = (text: string) =>
    new BrokerMisconfiguredError(`broker.deadLetterSubscription ${dead.name} ${text}`);
  const refusal = notPullable(dead);
  if (refusal) throw why(refusal);
  // Checked before the topic: with no dead-letter topic configured (or the source topic
  // given as one) nothing else would catch it, and every pass would take live messages
  // for dead letters and replay publish them to the topic again, each pass once more.
  if (dead.topic === source.topic) {
    throw why(
      `reads the consumer’s own topic ${source.topic}: it would list live messages as dead letters, and a replay would publish them to that topic again. Use a subscription on the dead-letter topic`,
    );
  }
  if (topic !== undefined && dead.topic !== pubsub.topic(topic).name) {
    throw why(`reads ${dead.topic}, not the consumer's dead-letter topic ${pubsub.topic(topic).name}`);
  }
  // Pull hands out one message per ordering key until it is acked: a listing would stop short.
  if (dead.messageOrdering) throw why('has message ordering enabled: a pass could not read it whole');
  // Every pass that gives letters back counts a delivery: a policy would move them on.
  if (dead.deadLetterPolicy) {
    throw why(
      `has a dead-letter policy of its own (to ${dead.deadLetterPolicy.deadLetterTopic}): listing its letters would forward them`,
    );
  }
}

class PubSubDeadLetterSession implements DeadLetterSession {
  readonly defaultIdStrategy = { attribute: 'message-id' };
  /** Held copies by their Pub/Sub message ID, listed or not. */
  private readonly held = new Map<string, PubSubHeld>();
  private readonly renewal: NodeJS.Timeout;
  private renewing: Promise<void> = Promise.resolve();
  /** Until when every held copy is leased to this session (the oldest lease not renewed). */
  private leasedUntil = Number.POSITIVE_INFINITY;
  /** The last renewal's failure, while renewals fail. */
  private renewalError: Error | undefined;

  constructor(
    private readonly subscriber: v1.SubscriberClient,
    private readonly publisher: v1.PublisherClient,
    private readonly ownedClient: PubSub | undefined,
    private readonly source: SubscriptionFacts,
    readonly name: string,
  ) {
    this.renewal = setInterval(
      () => {
        this.renewing = this.renewAll();
      },
      (DEAD_LETTER_SESSION_LEASE_SECONDS * 1000) / 3,
    );
    this.renewal.unref();
  }

  async read(): Promise<HeldDeadLetter[]> {
    const letters: PubSubHeld[] = [];
    for (;;) {
      let received: ReceivedMessage[];
      let leasedAt: number;
      try {
        received = await this.pull();
        if (received.length === 0) return letters;
        leasedAt = Date.now();
        await this.modAck(
          received.map((r) => r.ackId!),
          DEAD_LETTER_SESSION_LEASE_SECONDS,
        );
      } catch (error) {
        // The bare gRPC error ('1 CANCELLED: Call cancelled') does not tell an operator
        // whether anything was moved: nothing was, and a later pass reads the letters again.
        throw explained(
          `reading dead letters from ${this.name} failed after ${this.held.size} copies (${(error as Error).message}): nothing was moved; the copies read come back to the subscription (given back now, or at their ack deadline) for a later pass`,
          error,
        );
      }
      this.leasedUntil = Math.min(this.leasedUntil, leasedAt + DEAD_LETTER_SESSION_LEASE_SECONDS * 1000);
      for (const message of received) {
        const copyId = message.message?.messageId ?? '';
        const known = this.held.get(copyId);
        // Its lease lapsed and it came again: the newer ack ID is the one that settles it.
        if (known) {
          known.ackId = message.ackId!;
          continue;
        }
        const letter = describe(message);
        this.held.set(copyId, letter);
        if (this.isOurs(letter)) letters.push(letter);
      }
    }
  }

  async replay(letter: HeldDeadLetter): Promise<void> {
    const held = letter as PubSubHeld;
    if (!this.source.topic || this.source.topic === '_deleted-topic_') {
      throw new BrokerMisconfiguredError(
        `cannot replay to ${this.source.name}: its topic was deleted; the dead letter stays`,
      );
    }
    // The raw gRPC errors name neither the letter nor what became of it: an operator must
    // know whether it went out, and that a re-run is safe, rather than guess.
    const id = held.replayMessage.attributes?.['message-id'] ?? `copy ${held.copyId}`;
    this.checkLease(`replay of dead letter ${id}`);
    try {
      // Returns once the service stored the message (its new message ID).
      await this.publisher.publish({ topic: this.source.topic, messages: [held.replayMessage] });
    } catch (error) {
      throw explained(
        `replay of dead letter ${id} failed: the publish to ${this.source.topic} was refused (${(error as Error).message}); it stays in ${this.name}`,
        error,
      );
    }
    try {
      // Not checked against the lease: once published, acking is the best left to do.
      await this.acknowledge(held);
    } catch (error) {
      throw explained(
        `replay of dead letter ${id}: published to ${this.source.topic}, but removing it from ${this.name} failed (${(error as Error).message}): it is in both; a later replay sends it again and the consumer's marker absorbs it`,
        error,
      );
    }
  }

  async remove(letter: HeldDeadLetter): Promise<void> {
    const held = letter as PubSubHeld;
    const id = held.replayMessage.attributes?.['message-id'] ?? `copy ${held.copyId}`;
    this.checkLease(`removal of dead letter ${id}`);
    try {
      await this.acknowledge(held);
    } catch (error) {
      // Only discard removes without a replay, and it recorded the letter first.
      throw explained(
        `discard of dead letter ${id}: removing it from ${this.name} failed (${(error as Error).message}): it stays, its discard recorded; run the discard again (it records it a second time)`,
        error,
      );
    }
  }

  private async acknowledge(held: PubSubHeld): Promise<void> {
    await this.subscriber.acknowledge({ subscription: this.name, ackIds: [held.ackId] });
    this.held.delete(held.copyId);
  }

  /**
   * Gives back what is held. Best effort: a copy whose give-back fails comes back anyway
   * when its lease ends, and a failure here would hide the result of the pass.
   */
  async close(): Promise<void> {
    clearInterval(this.renewal);
    try {
      await this.renewing;
      await this.modAck(
        [...this.held.values()].map((h) => h.ackId),
        0,
        true,
      );
      this.held.clear();
    } finally {
      await this.subscriber.close().catch(() => {});
      await this.publisher.close().catch(() => {});
      await this.ownedClient?.close().catch(() => {});
    }
  }

  private async pull(): Promise<ReceivedMessage[]> {
    try {
      const [response] = await this.subscriber.pull({ subscription: this.name, maxMessages: PULL_BATCH }, {
        timeout: LAST_PULL_WAIT_MS,
        retry: { retryCodes: [], backoffSettings: {} },
      } as never);
      return response.receivedMessages ?? [];
    } catch (error) {
      if ((error as { code?: unknown }).code === DEADLINE_EXCEEDED) return [];
      throw error;
    }
  }

  private async renewAll(): Promise<void> {
    const renewedAt = Date.now();
    try {
      await this.modAck(
        [...this.held.values()].map((h) => h.ackId),
        DEAD_LETTER_SESSION_LEASE_SECONDS,
      );
    } catch (error) {
      this.renewalError = error as Error;
      return;
    }
    this.renewalError = undefined;
    this.leasedUntil = renewedAt + DEAD_LETTER_SESSION_LEASE_SECONDS * 1000;
  }

  /**
   * Refuses to act on a copy whose lease is about to end, or has ended, for want of
   * renewals: its ack would be dropped (a replayed letter then stays in the DLQ as well, and
   * the report would claim it moved), or another pass may already hold it.
   */
  private checkLease(what: string) {
    if (Date.now() < this.leasedUntil - LEASE_MARGIN_MS) return;
    const why = this.renewalError ? ` (${this.renewalError.message})` : '';
    throw new Error(
      `the lease on the dead letters of ${this.name} could not be renewed${why} and ends at ${new Date(this.leasedUntil).toISOString()}: stopped before the ${what}, so that no letter is in both places or in two passes; the rest stay in the subscription, run the command again`,
    );
  }

  /** `bestEffort`: a failed request does not stop the others (its copies come back at their deadline). */
  private async modAck(ackIds: string[], seconds: number, bestEffort = false): Promise<void> {
    for (let i = 0; i < ackIds.length; i += IDS_PER_REQUEST) {
      const request = this.subscriber.modifyAckDeadline({
        subscription: this.name,
        ackIds: ackIds.slice(i, i + IDS_PER_REQUEST),
        ackDeadlineSeconds: seconds,
      });
      await (bestEffort ? request.catch(() => {}) : request);
    }
  }

  /** Whether this consumer's subscription dead-lettered it (a copy that does not say is listed). */
  private isOurs(letter: PubSubHeld): boolean {
    const from = letter.sourceSubscription;
    if (from === undefined) return true;
    return from === this.source.name || from === this.source.name.split('/').pop();
  }
}

/** An error that says what happened to the letters, the gRPC error as its cause (and its code kept). */
function explained(message: string, cause: unknown): Error {
  return Object.assign(new Error(message, { cause }), { code: (cause as { code?: unknown }).code });
}

function describe(received: ReceivedMessage): PubSubHeld {
  const message = received.message ?? {};
  const copyAttributes: Record<string, string> = { ...(message.attributes ?? {}) };
  const info = readDeadLetter(copyAttributes);
  const policySource = copyAttributes.CloudPubSubDeadLetterSourceSubscription;
  const policyProject = copyAttributes.CloudPubSubDeadLetterSourceSubscriptionProject;
  const policyCount = Number(copyAttributes.CloudPubSubDeadLetterSourceDeliveryCount);
  // The original's: its own attributes, and the ones the copy folded away for room.
  const attributes: Record<string, string> = { ...copyAttributes, ...(info?.moved ?? {}) };
  for (const name of Object.values(DEAD_LETTER_ATTRIBUTES)) delete attributes[name];
  for (const name of POLICY_ATTRIBUTES) delete attributes[name];
  const data = Buffer.from(message.data ?? '');
  // Oncely keeps the key as an attribute (its copies are published without one); the
  // policy forwards it as the copy's own.
  const orderingKey = info?.orderingKey || message.orderingKey || undefined;
  const sourceSubscription = info?.sourceSubscription
    ? info.sourceSubscription
    : policySource
      ? policyProject
        ? `projects/${policyProject}/subscriptions/${policySource}`
        : policySource
      : undefined;
  const publishTime = message.publishTime;
  const publishedAt = publishTime?.seconds
    ? new Date(Number(publishTime.seconds) * 1000 + Math.floor(Number(publishTime.nanos ?? 0) / 1e6))
    : undefined;
  const brokerMessageId = info?.sourceMessageId || undefined;
  return {
    ackId: received.ackId!,
    copyId: message.messageId ?? '',
    replayMessage: { data, attributes, ...(orderingKey ? { orderingKey } : {}) },
    envelope: {
      body: data,
      attributes,
      // The original's broker ID (a replay gets a new one: the `broker` strategy cannot dedup it).
      ...(brokerMessageId ? { brokerMessageId } : {}),
    },
    // Without Oncely's attributes the subscription's dead-letter policy forwarded it.
    reason: info?.reason ?? (policySource !== undefined ? 'broker-redrive' : 'unknown'),
    ...(info?.detail ? { error: info.detail } : {}),
    ...(Number.isInteger(policyCount) && policyCount > 0 ? { attempts: policyCount } : {}),
    ...(publishedAt ? { lastFailedAt: publishedAt } : {}),
    ...(sourceSubscription ? { sourceSubscription } : {}),
  };
}
