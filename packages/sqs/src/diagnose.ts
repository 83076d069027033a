import { SQSClient } from '@aws-sdk/client-sqs';
import { type ConsumerConfig, type DiagnoseFinding, type DiagnoseReport, isOncelyError } from '@oncely/core';
import { MAX_TOTAL_VISIBILITY_MS } from './SqsDelivery.js';
import { type QueueFacts, SqsQueueClient } from './SqsQueueClient.js';
import { parseSqsConfig, type SqsSettings } from './sqsConfig.js';

/**
 * Checks an SQS consumer config against the real queue, for `oncely doctor`:
 *
 * - the queue exists (its attributes can be read);
 * - the visibility timeout against `handlerTimeoutMs` (and the 12-hour cap);
 * - the RedrivePolicy's `maxReceiveCount` is **above** `maxAttempts`, so Oncely, which
 *   knows the reason, dead-letters first, and a store outage does not push healthy
 *   messages into the dead-letter queue;
 * - where dead-lettered messages go (`deadLetterQueueUrl`, the redrive target, or nowhere);
 * - FIFO content-based deduplication and the ID strategy.
 *
 * Never throws: every problem is a finding.
 *
 * @example
 * ```ts
 * const report = await diagnose({ name: 'payments', broker: { type: 'sqs', queueUrl }, store, handler, maxAttempts: 5 });
 * for (const f of report.findings) console.log(f.level, f.message);
 * ```
 */
export async function diagnose(config: ConsumerConfig<any, any>): Promise<DiagnoseReport> {
  const findings: DiagnoseFinding[] = [];
  const report: DiagnoseReport = { broker: 'sqs', findings };
  let settings: SqsSettings;
  try {
    settings = parseSqsConfig(config.broker as unknown as Record<string, unknown>);
  } catch (error) {
    findings.push({ level: 'error', message: (error as Error).message });
    return report;
  }
  const client =
    settings.client ??
    new SQSClient({
      endpoint: settings.endpoint,
      region: settings.region,
      credentials: settings.credentials,
    });
  try {
    const queue = new SqsQueueClient(client, settings.queueUrl);
    let facts: QueueFacts;
    try {
      facts = await queue.facts();
    } catch (error) {
      findings.push({
        level: 'error',
        message: isOncelyError(error, 'BROKER_MISCONFIGURED')
          ? error.message
          : `cannot read the attributes of ${settings.queueUrl}: ${(error as Error).message}`,
      });
      return report;
    }
    findings.push({
      level: 'ok',
      message: `queue ${settings.queueUrl} exists (${facts.fifo ? 'FIFO' : 'standard'})`,
    });
    checkVisibility(config, settings, facts, findings);
    checkRedrive(config, facts, findings);
    await checkDeadLetterQueue(queue, settings, facts, findings);
    checkDeduplication(config, facts, findings);
    if (facts.fifo && (settings.maxMessages ?? 1) > 1) {
      findings.push({
        level: 'warn',
        message: `broker.maxMessages ${settings.maxMessages} on a FIFO queue: when a message is retried, the later messages of its group received with it are released and received again, one more ApproximateReceiveCount each (toward the RedrivePolicy's maxReceiveCount). The FIFO default is 1`,
      });
    }
  } finally {
    if (!settings.client) client.destroy();
  }
  return report;
}

function checkVisibility(
  config: ConsumerConfig<any, any>,
  settings: SqsSettings,
  facts: QueueFacts,
  findings: DiagnoseFinding[],
): void {
  const handlerTimeoutMs = config.handlerTimeoutMs ?? 30_000;
  const visibilityMs = settings.visibilityTimeoutMs ?? (facts.visibilityTimeoutMs || 30_000);
  const origin = settings.visibilityTimeoutMs
    ? 'broker.visibilityTimeoutMs'
    : "the queue's VisibilityTimeout";
  const heartbeatMs = settings.heartbeatIntervalMs ?? visibilityMs / 2;
  if (heartbeatMs >= visibilityMs) {
    findings.push({
      level: 'error',
      message: `broker.heartbeatIntervalMs ${heartbeatMs} is not below the visibility timeout (${visibilityMs} ms, ${origin}): start() refuses it`,
    });
  }
  if (handlerTimeoutMs > MAX_TOTAL_VISIBILITY_MS) {
    findings.push({
      level: 'error',
      message: `handlerTimeoutMs ${handlerTimeoutMs} exceeds SQS's 12-hour total visibility per receipt: the message is redelivered while the handler still runs`,
    });
  }
  if (config.leaseRenewal === false && visibilityMs < handlerTimeoutMs) {
    findings.push({
      level: 'error',
      message: `leaseRenewal is off and the visibility timeout (${visibilityMs} ms, ${origin}) is shorter than handlerTimeoutMs (${handlerTimeoutMs} ms): slow messages are redelivered while they run`,
    });
  } else if (visibilityMs < 2000) {
    findings.push({
      level: 'warn',
      message: `visibility timeout ${visibilityMs} ms (${origin}) is very short: the heartbeat must succeed every ${heartbeatMs} ms`,
    });
  } else {
    findings.push({
      level: 'ok',
      message: `visibility timeout ${visibilityMs} ms (${origin}); ${visibilityMs < handlerTimeoutMs ? `the heartbeat extends it every ${heartbeatMs} ms up to handlerTimeoutMs ${handlerTimeoutMs} ms` : `covers handlerTimeoutMs ${handlerTimeoutMs} ms`}`,
    });
  }
  if (!settings.visibilityTimeoutMs && facts.visibilityTimeoutMs < 1000) {
    findings.push({
      level: 'warn',
      message:
        "the queue's VisibilityTimeout is 0; the adapter asks for 30 s on each receive. Set broker.visibilityTimeoutMs",
    });
  }
}

function checkRedrive(
  config: ConsumerConfig<any, any>,
  facts: QueueFacts,
  findings: DiagnoseFinding[],
): void {
  const maxAttempts = config.maxAttempts ?? 5;
  if (!facts.redrive) {
    findings.push({
      level: 'ok',
      message:
        'no RedrivePolicy: only Oncely dead-letters (after maxAttempts); a message that crashes the process every time is caught by the attempt count',
    });
    return;
  }
  const { maxReceiveCount, deadLetterTargetArn } = facts.redrive;
  if (maxReceiveCount <= maxAttempts) {
    findings.push({
      level: 'error',
      message: `RedrivePolicy maxReceiveCount (${maxReceiveCount}) must be above maxAttempts (${maxAttempts}): otherwise SQS moves messages to ${deadLetterTargetArn} without a reason before Oncely dead-letters them, and a store outage can push healthy messages there`,
    });
  } else {
    findings.push({
      level: 'ok',
      message: `RedrivePolicy maxReceiveCount ${maxReceiveCount} is above maxAttempts ${maxAttempts}: Oncely dead-letters first, SQS's redrive is the backstop`,
    });
  }
}

async function checkDeadLetterQueue(
  queue: SqsQueueClient,
  settings: SqsSettings,
  facts: QueueFacts,
  findings: DiagnoseFinding[],
): Promise<void> {
  if (settings.deadLetterQueueUrl) {
    try {
      const target = await queue.facts(settings.deadLetterQueueUrl);
      findings.push({
        level: target.fifo === facts.fifo ? 'ok' : 'warn',
        message:
          target.fifo === facts.fifo
            ? `dead-lettered messages are sent to ${settings.deadLetterQueueUrl} with their reason`
            : `dead-letter queue ${settings.deadLetterQueueUrl} is ${target.fifo ? 'FIFO' : 'standard'} but the queue is ${facts.fifo ? 'FIFO' : 'standard'}`,
      });
    } catch (error) {
      findings.push({ level: 'error', message: `broker.deadLetterQueueUrl: ${(error as Error).message}` });
    }
    return;
  }
  if (facts.redrive) {
    try {
      const url = await queue.urlOfArn(facts.redrive.deadLetterTargetArn);
      findings.push({
        level: 'ok',
        message: `no broker.deadLetterQueueUrl: dead-lettered messages are sent with their reason to the RedrivePolicy target ${url}`,
      });
    } catch (error) {
      findings.push({
        level: 'warn',
        message: `the RedrivePolicy target ${facts.redrive.deadLetterTargetArn} cannot be resolved (${(error as Error).message}): dead-lettered messages are left to SQS's redrive, without a reason. Set broker.deadLetterQueueUrl`,
      });
    }
    return;
  }
  findings.push({
    level: 'error',
    message:
      'no dead-letter destination (no broker.deadLetterQueueUrl, no RedrivePolicy): poison messages are parked on the queue for up to 12 hours at a time instead of being dead-lettered',
  });
}

function checkDeduplication(
  config: ConsumerConfig<any, any>,
  facts: QueueFacts,
  findings: DiagnoseFinding[],
): void {
  const strategy = config.idStrategy;
  if (strategy === 'deduplication-id') {
    if (!facts.fifo) {
      findings.push({
        level: 'error',
        message: "idStrategy 'deduplication-id' needs a FIFO queue; this one is standard",
      });
    } else if (facts.contentBasedDeduplication) {
      findings.push({
        level: 'error',
        message:
          "idStrategy 'deduplication-id' is refused on a queue with content-based deduplication: the ID is a hash of the body, so two different messages with the same body would be one",
      });
    } else {
      findings.push({
        level: 'warn',
        message:
          "idStrategy 'deduplication-id': SQS keeps a MessageDeduplicationId unique for 5 minutes only; producers must never reuse one for a different message",
      });
    }
  } else if (strategy === 'broker') {
    findings.push({
      level: 'warn',
      message:
        "idStrategy 'broker' (SQS MessageId) catches redeliveries only: a producer that sends twice gets two MessageIds",
    });
  }
  if (facts.fifo && facts.contentBasedDeduplication) {
    findings.push({
      level: 'warn',
      message:
        'ContentBasedDeduplication is on: SQS drops a message whose body equals one sent in the last 5 minutes (attributes are not hashed), even when it is a different order',
    });
  }
}
