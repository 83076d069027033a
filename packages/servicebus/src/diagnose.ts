import { ServiceBusAdministrationClient, ServiceBusClient } from '@azure/service-bus';
import type { BrokerConfig, ConsumerConfig, DiagnoseFinding, DiagnoseReport } from '@oncely/core';
import { MAX_LOCK_DURATION_MS, parseServiceBusConfig, type ServiceBusSettings } from './serviceBusConfig.js';

/** What diagnose could learn about the entity. */
interface EntityFacts {
  lockDurationMs?: number;
  maxDeliveryCount?: number;
  requiresSession?: boolean;
  requiresDuplicateDetection?: boolean;
  origin: string;
}

/**
 * Checks a Service Bus consumer config for `oncely doctor`:
 *
 * - the entity answers (a peek over AMQP);
 * - its LockDuration against `handlerTimeoutMs` (and the 5-minute cap);
 * - its MaxDeliveryCount is **above** `maxAttempts`, so Oncely, which knows the reason,
 *   dead-letters first and releases during a store outage do not push healthy messages
 *   into `$DeadLetterQueue`;
 * - sessions configured as the entity requires;
 * - the ID strategy.
 *
 * Entity properties come from the broker section (`lockDurationMs`,
 * `maxDeliveryCount`) or, where it can be read, the administration API (not on the
 * emulators, which have none over AMQP). Never throws: every problem is a finding.
 *
 * @example
 * ```ts
 * const report = await diagnose({ name: 'payments', broker: { type: 'servicebus', connectionString, queueName: 'payments' }, store, handler });
 * for (const f of report.findings) console.log(f.level, f.message);
 * ```
 */
export async function diagnose(config: ConsumerConfig<any, any>): Promise<DiagnoseReport> {
  const findings: DiagnoseFinding[] = [];
  const report: DiagnoseReport = { broker: 'servicebus', findings };
  let settings: ServiceBusSettings;
  try {
    settings = parseServiceBusConfig(config.broker as BrokerConfig);
  } catch (error) {
    findings.push({ level: 'error', message: (error as Error).message });
    return report;
  }
  const client = settings.client ?? new ServiceBusClient(settings.connectionString!, settings.clientOptions);
  try {
    try {
      const receiver = settings.queueName
        ? client.createReceiver(settings.queueName)
        : client.createReceiver(settings.topicName!, settings.subscriptionName!);
      if (!settings.sessions) await receiver.peekMessages(1);
      await receiver.close();
      findings.push({ level: 'ok', message: `entity ${settings.entityPath} answers` });
    } catch (error) {
      findings.push({
        level: 'error',
        message: `cannot reach ${settings.entityPath}: ${(error as Error).message}`,
      });
      return report;
    }
    const facts = await entityFacts(settings);
    checkLock(config, facts, findings);
    checkMaxDeliveryCount(config, facts, findings);
    if (facts.requiresSession !== undefined && facts.requiresSession !== settings.sessions) {
      findings.push({
        level: 'error',
        message: facts.requiresSession
          ? `${settings.entityPath} requires sessions: set broker.sessions to true`
          : `${settings.entityPath} does not use sessions: broker.sessions must be false`,
      });
    }
    if (config.idStrategy === 'broker') {
      findings.push({
        level: 'warn',
        message:
          "idStrategy 'broker' (the sequence number) catches redeliveries only: a producer that sends twice, and every retry copy, gets a new one",
      });
    }
    if (facts.requiresDuplicateDetection) {
      findings.push({
        level: 'ok',
        message:
          'duplicate detection is on: producer retries with the same MessageId inside the window are dropped by Service Bus; Oncely covers redeliveries and what falls outside the window',
      });
    }
  } finally {
    if (!settings.client) await client.close().catch(() => {});
  }
  return report;
}

async function entityFacts(settings: ServiceBusSettings): Promise<EntityFacts> {
  const facts: EntityFacts = {
    lockDurationMs: settings.lockDurationMs,
    maxDeliveryCount: settings.maxDeliveryCount,
    origin: 'the broker section',
  };
  const connectionString = settings.connectionString;
  if (!connectionString || /UseDevelopmentEmulator=true/i.test(connectionString)) return facts;
  try {
    const admin = new ServiceBusAdministrationClient(connectionString);
    const entity = settings.queueName
      ? await admin.getQueue(settings.queueName)
      : await admin.getSubscription(settings.topicName!, settings.subscriptionName!);
    return {
      lockDurationMs: isoDurationMs(entity.lockDuration) ?? facts.lockDurationMs,
      maxDeliveryCount: entity.maxDeliveryCount ?? facts.maxDeliveryCount,
      requiresSession: entity.requiresSession,
      requiresDuplicateDetection:
        'requiresDuplicateDetection' in entity ? Boolean(entity.requiresDuplicateDetection) : undefined,
      origin: 'the administration API',
    };
  } catch {
    return facts;
  }
}

function checkLock(config: ConsumerConfig<any, any>, facts: EntityFacts, findings: DiagnoseFinding[]): void {
  const handlerTimeoutMs = config.handlerTimeoutMs ?? 30_000;
  const lock = facts.lockDurationMs;
  if (lock === undefined) {
    findings.push({
      level: 'warn',
      message: `LockDuration unknown (set broker.lockDurationMs): the adapter learns it from deliveries and renews every half of it up to handlerTimeoutMs ${handlerTimeoutMs} ms`,
    });
    return;
  }
  if (lock > MAX_LOCK_DURATION_MS) {
    findings.push({
      level: 'error',
      message: `LockDuration ${lock} ms is above Service Bus's 5-minute maximum`,
    });
  } else if (config.leaseRenewal === false && lock < handlerTimeoutMs) {
    findings.push({
      level: 'error',
      message: `leaseRenewal is off and LockDuration (${lock} ms, from ${facts.origin}) is shorter than handlerTimeoutMs (${handlerTimeoutMs} ms): slow messages are redelivered while they run`,
    });
  } else {
    findings.push({
      level: 'ok',
      message: `LockDuration ${lock} ms (from ${facts.origin}); ${lock < handlerTimeoutMs ? `the lease keeper renews it every ${lock / 2} ms per lock token up to handlerTimeoutMs ${handlerTimeoutMs} ms` : `covers handlerTimeoutMs ${handlerTimeoutMs} ms`}`,
    });
  }
}

function checkMaxDeliveryCount(
  config: ConsumerConfig<any, any>,
  facts: EntityFacts,
  findings: DiagnoseFinding[],
): void {
  const maxAttempts = config.maxAttempts ?? 5;
  const max = facts.maxDeliveryCount;
  if (max === undefined) {
    findings.push({
      level: 'warn',
      message: `MaxDeliveryCount unknown (set broker.maxDeliveryCount): it must be above maxAttempts ${maxAttempts} (the service default is 10)`,
    });
  } else if (max <= maxAttempts) {
    findings.push({
      level: 'error',
      message: `MaxDeliveryCount (${max}, from ${facts.origin}) must be above maxAttempts (${maxAttempts}): otherwise Service Bus dead-letters messages (MaxDeliveryCountExceeded, without a reason) before Oncely does, and releases during a store outage count towards it`,
    });
  } else {
    findings.push({
      level: 'ok',
      message: `MaxDeliveryCount ${max} is above maxAttempts ${maxAttempts}: Oncely dead-letters first, Service Bus is the backstop`,
    });
  }
}

/** `PT1M30S` → 90000; undefined when it does not parse. */
function isoDurationMs(value: string | undefined): number | undefined {
  if (!value) return undefined;
  const m =
    /^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/.exec(
      value,
    );
  if (!m) return undefined;
  return Math.round(
    (Number(m[1] ?? 0) * 86_400 + Number(m[2] ?? 0) * 3_600 + Number(m[3] ?? 0) * 60 + Number(m[4] ?? 0)) *
      1000,
  );
}
