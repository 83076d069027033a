import { PubSub } from '@google-cloud/pubsub';
import {
  CONSUMER_DEFAULTS,
  type ConsumerConfig,
  type DiagnoseFinding,
  type DiagnoseReport,
  isOncelyError,
} from '@oncely/core';
import { maxExtensionMsFor, type PubSubSettings, parsePubSubConfig } from './pubsubConfig.js';
import { resolveProject } from './resolveProject.js';
import {
  notPullable,
  readSubscriptionFacts,
  type SubscriptionFacts,
  topicExists,
} from './subscriptionFacts.js';

/**
 * Checks a Pub/Sub consumer config against the real subscription, for `oncely doctor`:
 *
 * - a project can be found (broker.projectId, the environment, the credentials);
 * - the subscription exists, is not detached, and can be pulled (not push, not an export);
 * - the ack deadline (and the lease renewal that extends it) against `handlerTimeoutMs`;
 * - the dead-letter policy's `maxDeliveryAttempts` is **above** `maxAttempts`, so Oncely,
 *   which knows the reason, dead-letters first, and a store outage does not push healthy
 *   messages to the dead-letter topic;
 * - where dead-lettered messages go, and that the topic exists;
 * - whether exactly-once delivery is on (stale acks detectable) and what it does not cover;
 * - the ID strategy.
 *
 * Never throws: every problem is a finding.
 *
 * @example
 * ```ts
 * const report = await diagnose({ name: 'payments', broker: { type: 'pubsub', subscription: 'payments' }, store, handler });
 * for (const f of report.findings) console.log(f.level, f.message);
 * ```
 */
export async function diagnose(config: ConsumerConfig<any, any>): Promise<DiagnoseReport> {
  const findings: DiagnoseFinding[] = [];
  const report: DiagnoseReport = { broker: 'pubsub', findings };
  let settings: PubSubSettings;
  try {
    settings = parsePubSubConfig(config.broker as unknown as Record<string, unknown>);
    maxExtensionMsFor(settings, config.handlerTimeoutMs ?? CONSUMER_DEFAULTS.handlerTimeoutMs);
  } catch (error) {
    findings.push({ level: 'error', message: (error as Error).message });
    return report;
  }
  const pubsub =
    settings.client ??
    new PubSub({
      ...(settings.projectId ? { projectId: settings.projectId } : {}),
      ...(settings.apiEndpoint ? { apiEndpoint: settings.apiEndpoint } : {}),
    });
  try {
    // Before any name: until the project is known the client's names hold a placeholder.
    try {
      await resolveProject(pubsub);
    } catch (error) {
      findings.push({ level: 'error', message: `${(error as Error).message}; start() fails` });
      return report;
    }
    const name = pubsub.subscription(settings.subscription).name;
    let facts: SubscriptionFacts;
    try {
      facts = await readSubscriptionFacts(pubsub, name, settings.connectTimeoutMs);
    } catch (error) {
      findings.push({
        level: 'error',
        message: isOncelyError(error, 'BROKER_MISCONFIGURED')
          ? error.message
          : `cannot read subscription ${name}: ${(error as Error).message}`,
      });
      return report;
    }
    const refusal = notPullable(facts);
    findings.push({
      level: refusal ? 'error' : 'ok',
      message: refusal
        ? `subscription ${name} ${refusal}; start() fails`
        : `subscription ${name} exists (topic ${facts.topic})`,
    });
    checkLease(config, settings, facts, findings);
    await checkDeadLetters(pubsub, config, settings, facts, findings);
    checkExactlyOnce(facts, findings);
    if (config.idStrategy === 'broker') {
      findings.push({
        level: 'warn',
        message:
          "idStrategy 'broker' (Pub/Sub messageId) catches redeliveries only: a publisher retry gets a new messageId",
      });
    }
  } finally {
    if (!settings.client) await pubsub.close().catch(() => {});
  }
  return report;
}

function checkLease(
  config: ConsumerConfig<any, any>,
  settings: PubSubSettings,
  facts: SubscriptionFacts,
  findings: DiagnoseFinding[],
): void {
  const handlerTimeoutMs = config.handlerTimeoutMs ?? CONSUMER_DEFAULTS.handlerTimeoutMs;
  const seconds = settings.ackDeadlineSeconds ?? facts.ackDeadlineSeconds;
  const origin = settings.ackDeadlineSeconds
    ? 'broker.ackDeadlineSeconds'
    : "the subscription's ackDeadlineSeconds";
  const leaseMs = seconds * 1000;
  if (config.leaseRenewal === false && leaseMs < handlerTimeoutMs) {
    findings.push({
      level: 'error',
      message: `leaseRenewal is off and the ack deadline (${seconds} s, ${origin}) is shorter than handlerTimeoutMs (${handlerTimeoutMs} ms): slow messages are redelivered while they run`,
    });
    return;
  }
  findings.push({
    level: leaseMs < 2000 ? 'warn' : 'ok',
    message:
      leaseMs < handlerTimeoutMs
        ? `ack deadline ${seconds} s (${origin}); the lease keeper extends it every ${leaseMs / 2} ms (ModifyAckDeadline), aborts ctx.signal at handlerTimeoutMs ${handlerTimeoutMs} ms and stops renewing ${maxExtensionMsFor(settings, handlerTimeoutMs)} ms after dispatch (broker.maxExtensionMs). The client's own extension (maxExtensionTime) is not used: it stops silently, the keeper enforces its own deadline`
        : `ack deadline ${seconds} s (${origin}) covers handlerTimeoutMs ${handlerTimeoutMs} ms`,
  });
}

async function checkDeadLetters(
  pubsub: PubSub,
  config: ConsumerConfig<any, any>,
  settings: PubSubSettings,
  facts: SubscriptionFacts,
  findings: DiagnoseFinding[],
): Promise<void> {
  const maxAttempts = config.maxAttempts ?? CONSUMER_DEFAULTS.maxAttempts;
  const policy = facts.deadLetterPolicy;
  if (policy) {
    findings.push(
      policy.maxDeliveryAttempts <= maxAttempts
        ? {
            level: 'error',
            message: `the dead-letter policy's maxDeliveryAttempts (${policy.maxDeliveryAttempts}) must be above maxAttempts (${maxAttempts}): otherwise Pub/Sub forwards messages to ${policy.deadLetterTopic} without a reason before Oncely dead-letters them, and a store outage can push healthy messages there`,
          }
        : {
            level: 'ok',
            message: `dead-letter policy maxDeliveryAttempts ${policy.maxDeliveryAttempts} is above maxAttempts ${maxAttempts}; deliveryAttempt is the broker's count`,
          },
    );
  } else {
    findings.push({
      level: 'ok',
      message:
        'no dead-letter policy: the service sends no deliveryAttempt, so attempts are counted in the store; only Oncely dead-letters',
    });
  }
  const target = settings.deadLetterTopic ?? policy?.deadLetterTopic;
  if (!target) {
    findings.push({
      level: 'error',
      message:
        'no dead-letter topic (no broker.deadLetterTopic, no dead-letter policy): poison messages are parked (600 s at a time) instead of being dead-lettered',
    });
    return;
  }
  const found = await topicExists(pubsub, target, settings.connectTimeoutMs);
  findings.push(
    found === 'exists'
      ? { level: 'ok', message: `dead-lettered messages are published to ${target} with their reason` }
      : found === 'missing'
        ? {
            level: 'error',
            message: `the dead-letter topic ${target} does not exist: start() fails, and poison messages could not be dead-lettered`,
          }
        : {
            level: 'warn',
            message: `dead-lettered messages are published to ${target}, which could not be checked: ${found.unknown.message}`,
          },
  );
}

function checkExactlyOnce(facts: SubscriptionFacts, findings: DiagnoseFinding[]): void {
  findings.push(
    facts.exactlyOnce
      ? {
          level: 'ok',
          message:
            'exactly-once delivery is on: no redelivery after a successful ack or while a lease is held, and a stale ack is reported (ackFailed). It does not cover publisher duplicates (new messageIds) or a crash before the ack: the processed marker does',
        }
      : {
          level: 'ok',
          message:
            'exactly-once delivery is off: an ack after the lease lapsed is accepted silently and the message may come again; the processed marker makes that redelivery a duplicate',
        },
  );
  if (facts.messageOrdering) {
    findings.push({
      level: 'ok',
      message:
        'message ordering is on: one message per ordering key runs at a time; a retry brings the later messages of its key back',
    });
  }
}
