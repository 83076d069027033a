import type { PubSub, protos } from '@google-cloud/pubsub';
import { BrokerMisconfiguredError } from '@oncely/core';

/** gRPC NOT_FOUND. */
const NOT_FOUND = 5;

/**
 * What the adapter and `diagnose()` need to know about a subscription.
 *
 * @example
 * ```ts
 * const facts = await readSubscriptionFacts(pubsub, 'projects/p/subscriptions/payments');
 * if (!facts.exactlyOnce) console.warn('stale acks are accepted silently');
 * ```
 */
export interface SubscriptionFacts {
  name: string;
  topic: string;
  ackDeadlineSeconds: number;
  exactlyOnce: boolean;
  messageOrdering: boolean;
  deadLetterPolicy?: { deadLetterTopic: string; maxDeliveryAttempts: number };
  retryPolicy?: { minimumBackoffMs: number; maximumBackoffMs: number };
  detached: boolean;
  /**
   * How the service delivers, when it is not pulled: a push endpoint, or an export to
   * BigQuery or Cloud Storage. Such a subscription refuses Pull and StreamingPull.
   */
  delivery?: { push: string } | { export: 'BigQuery' | 'Cloud Storage' };
}

/**
 * Why a consumer cannot pull from this subscription (detached, push, an export), or
 * undefined when it can.
 *
 * @example
 * ```ts
 * const why = notPullable(facts); // 'is a push subscription (endpoint https://…)'
 * ```
 */
export function notPullable(facts: SubscriptionFacts): string | undefined {
  if (facts.detached) return 'is detached from its topic: it receives nothing and cannot be pulled from';
  const { delivery } = facts;
  if (delivery === undefined) return undefined;
  return 'push' in delivery
    ? `is a push subscription (endpoint ${delivery.push}): the service refuses to be pulled from it (FAILED_PRECONDITION). Use a pull subscription, or make this one pull (an empty push config)`
    : `is a ${delivery.export} export subscription: the service refuses to be pulled from it. Use a pull subscription`;
}

function durationMs(
  duration: { seconds?: unknown; nanos?: unknown } | null | undefined,
  fallback: number,
): number {
  if (!duration) return fallback;
  return Number(duration.seconds ?? 0) * 1000 + Math.floor(Number(duration.nanos ?? 0) / 1e6);
}

/**
 * Reads the subscription's settings (GetSubscription), retries included within `timeoutMs`
 * (the client's own budget otherwise). A missing subscription is a
 * `BrokerMisconfiguredError`; other failures are rethrown as they are.
 *
 * @example
 * ```ts
 * const { ackDeadlineSeconds } = await readSubscriptionFacts(pubsub, name);
 * ```
 */
export async function readSubscriptionFacts(
  pubsub: PubSub,
  name: string,
  timeoutMs?: number,
): Promise<SubscriptionFacts> {
  let metadata: protos.google.pubsub.v1.ISubscription;
  try {
    // gax turns `timeout` into the call's total deadline, retries of UNAVAILABLE included.
    [metadata] = await pubsub.subscription(name).getMetadata(timeoutMs ? { timeout: timeoutMs } : undefined);
  } catch (error) {
    if ((error as { code?: unknown }).code === NOT_FOUND) {
      throw new BrokerMisconfiguredError(`Pub/Sub subscription ${name} does not exist`, { cause: error });
    }
    throw error;
  }
  const deadLetter = metadata.deadLetterPolicy;
  const retry = metadata.retryPolicy;
  const delivery = metadata.pushConfig?.pushEndpoint
    ? { push: metadata.pushConfig.pushEndpoint }
    : metadata.bigqueryConfig?.table
      ? { export: 'BigQuery' as const }
      : metadata.cloudStorageConfig?.bucket
        ? { export: 'Cloud Storage' as const }
        : undefined;
  return {
    name,
    topic: metadata.topic ?? '',
    // 0 means the default of 10 s (Subscription.ack_deadline_seconds).
    ackDeadlineSeconds: metadata.ackDeadlineSeconds || 10,
    exactlyOnce: !!metadata.enableExactlyOnceDelivery,
    messageOrdering: !!metadata.enableMessageOrdering,
    ...(deadLetter?.deadLetterTopic
      ? {
          deadLetterPolicy: {
            deadLetterTopic: deadLetter.deadLetterTopic,
            maxDeliveryAttempts: deadLetter.maxDeliveryAttempts || 5,
          },
        }
      : {}),
    ...(retry
      ? {
          retryPolicy: {
            minimumBackoffMs: durationMs(retry.minimumBackoff, 10_000),
            maximumBackoffMs: durationMs(retry.maximumBackoff, 600_000),
          },
        }
      : {}),
    detached: !!metadata.detached,
    ...(delivery ? { delivery } : {}),
  };
}

/**
 * Whether a topic exists (GetTopic), within `timeoutMs`: `'missing'` for NOT_FOUND, else
 * the error that kept the question open (a consumer allowed to publish to a topic is not
 * always allowed to read it: PERMISSION_DENIED says nothing about its existence).
 *
 * @example
 * ```ts
 * if ((await topicExists(pubsub, 'payments-dead-letters')) === 'missing') throw new Error('no such topic');
 * ```
 */
export async function topicExists(
  pubsub: PubSub,
  name: string,
  timeoutMs?: number,
): Promise<'exists' | 'missing' | { unknown: Error }> {
  try {
    await pubsub.topic(name).getMetadata(timeoutMs ? { timeout: timeoutMs } : undefined);
    return 'exists';
  } catch (error) {
    if ((error as { code?: unknown }).code === NOT_FOUND) return 'missing';
    return { unknown: error as Error };
  }
}
