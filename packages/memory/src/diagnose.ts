import type { ConsumerConfig, DiagnoseFinding, DiagnoseReport } from '@oncely/core';
import { resolveMemoryConfig } from './config.js';

/** The core's default `maxAttempts`, used when the config leaves it out. */
const DEFAULT_MAX_ATTEMPTS = 5;

/**
 * Checks a consumer config against its memory broker, for `oncely doctor`: the broker
 * section, the queue's state, and settings that weaken the guarantees.
 *
 * @example
 * ```ts
 * const report = await diagnose({ name: 'payments', broker: { type: 'memory', broker, queue: 'payments' }, store, handler });
 * for (const finding of report.findings) console.log(finding.level, finding.message);
 * ```
 */
export async function diagnose(config: ConsumerConfig<any, any>): Promise<DiagnoseReport> {
  const findings: DiagnoseFinding[] = [];
  const report: DiagnoseReport = { broker: 'memory', findings };
  let resolved: ReturnType<typeof resolveMemoryConfig>;
  try {
    resolved = resolveMemoryConfig(config.broker);
  } catch (error) {
    findings.push({ level: 'error', message: error instanceof Error ? error.message : String(error) });
    return report;
  }
  const { broker, queue, visibilityTimeoutMs } = resolved;
  if (broker.isClosed) {
    findings.push({ level: 'error', message: 'the memory broker is closed: nothing can be received' });
    return report;
  }
  findings.push({
    level: 'warn',
    message:
      'the memory broker lives in this process: unsettled messages are lost when it exits (use it for tests and demos)',
  });
  const stats = broker.stats(queue);
  findings.push({
    level: 'ok',
    message: `queue '${queue}': ${stats.visible} visible, ${stats.inFlight} in flight, ${stats.delayed} delayed, ${stats.deadLettered} dead-lettered`,
  });
  const options = broker.queueOptions(queue);
  const maxAttempts = config.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (options.maxDeliveries === undefined) {
    findings.push({
      level: 'ok',
      message: `no broker-side maxDeliveries: the consumer dead-letters after maxAttempts ${maxAttempts}`,
    });
  } else if (options.maxDeliveries <= maxAttempts) {
    findings.push({
      level: 'warn',
      message: `queue maxDeliveries (${options.maxDeliveries}) is not above maxAttempts (${maxAttempts}): the broker dead-letters before the consumer can record why`,
    });
  }
  const handlerTimeoutMs = config.handlerTimeoutMs ?? 30_000;
  if (config.leaseRenewal === false && visibilityTimeoutMs < handlerTimeoutMs) {
    findings.push({
      level: 'warn',
      message: `leaseRenewal is off and visibilityTimeoutMs (${visibilityTimeoutMs}) is below handlerTimeoutMs (${handlerTimeoutMs}): slow handlers see their message redelivered while they run`,
    });
  }
  return report;
}
