import { type ConsumerConfig, type DiagnoseFinding, type DiagnoseReport, isOncelyError } from '@oncely/core';
import type { ClusterAdmin } from './adapter/clientApi.js';
import { toolDriver } from './adapter/loadDriver.js';
import { resolveKafkaConfig } from './config.js';

/**
 * Checks a Kafka consumer's setup against the cluster for `oncely doctor`: the config,
 * that the cluster answers, the topic and its partition count against `concurrency`,
 * the dead-letter topic, the group's state and lag, and settings that weaken the
 * guarantees. Never throws: every problem is a finding.
 *
 * @example
 * ```ts
 * const report = await diagnose({ name: 'payments', broker: { type: 'kafka', brokers: ['localhost:9092'], topic: 'payments' }, store, handler });
 * for (const f of report.findings) console.log(f.level, f.message);
 * ```
 */
export async function diagnose(config: ConsumerConfig<any, any>): Promise<DiagnoseReport> {
  const findings: DiagnoseFinding[] = [];
  const report: DiagnoseReport = { broker: 'kafka', findings };
  let resolved: ReturnType<typeof resolveKafkaConfig>;
  try {
    resolved = resolveKafkaConfig(config.broker, config.name);
  } catch (error) {
    findings.push({ level: 'error', message: isOncelyError(error) ? error.message : String(error) });
    return report;
  }
  const { topic, deadLetterTopic, groupId } = resolved;
  const concurrency = config.concurrency ?? 1;
  if (config.idStrategy === 'broker') {
    findings.push({
      level: 'warn',
      message:
        "idStrategy 'broker' uses topic/partition/offset: it catches redeliveries only, not a producer sending the same message twice",
    });
  }
  if (config.idStrategy === 'content-hash') {
    findings.push({ level: 'warn', message: "idStrategy 'content-hash': two identical messages become one" });
  }
  if (config.mode === 'offsets' && !config.store?.offsets) {
    findings.push({
      level: 'error',
      message: "mode 'offsets' needs a store that keeps offsets (PostgresStore)",
    });
  }
  if (config.leaseRenewal === false && (config.handlerTimeoutMs ?? 30_000) >= resolved.sessionTimeout) {
    findings.push({
      level: 'warn',
      message: `leaseRenewal is off and handlerTimeoutMs >= sessionTimeout (${resolved.sessionTimeout} ms): a slow handler loses its partitions mid-record`,
    });
  }

  const handlerTimeoutMs = config.handlerTimeoutMs ?? 30_000;
  if (handlerTimeoutMs > resolved.rebalanceTimeout) {
    // kafkajs rejoins only after every running batch returned, and a batch waits for its
    // handler: a rebalance then waits the whole rebalanceTimeout, after which the broker
    // removes this member and the record runs again elsewhere (the marker keeps one effect).
    findings.push({
      level: 'warn',
      message: `handlerTimeoutMs ${handlerTimeoutMs} exceeds rebalanceTimeout (${resolved.rebalanceTimeout} ms): a rebalance during a long handler removes this member from the group and the record runs again on another member; raise broker.rebalanceTimeout above handlerTimeoutMs`,
    });
  }

  let admin: ClusterAdmin | undefined;
  try {
    // On broker.client: a platformatic user's doctor needs no kafkajs.
    admin = (await toolDriver(resolved, 'doctor')).admin();
    await admin.connect();
    const cluster = await admin.describeCluster();
    findings.push({
      level: 'ok',
      message: `cluster answers: ${cluster.brokers} broker(s), controller ${cluster.controller}`,
    });
    if (!(await admin.topicExists(topic))) {
      findings.push({ level: 'error', message: `topic '${topic}' does not exist` });
    } else {
      const partitions = await admin.topicPartitionCount(topic);
      findings.push({ level: 'ok', message: `topic '${topic}' has ${partitions} partition(s)` });
      const parallel = resolved.partitionsConsumedConcurrently ?? concurrency;
      if (partitions < parallel) {
        findings.push({
          level: 'warn',
          message: `only ${partitions} partition(s): at most ${partitions} record(s) run at once (records of one partition run in order, one at a time), not ${parallel}`,
        });
      }
      const [committed, ends] = await Promise.all([
        admin.committedOffsets(groupId, topic),
        admin.partitionOffsets(topic),
      ]);
      let lag = 0n;
      for (const end of ends) {
        const at = committed.get(end.partition) ?? -1n;
        lag += end.high - (at < 0n ? end.low : at);
      }
      findings.push({ level: 'ok', message: `group '${groupId}' lag: ${lag} record(s)` });
    }
    if (await admin.topicExists(deadLetterTopic)) {
      findings.push({ level: 'ok', message: `dead-letter topic '${deadLetterTopic}' exists` });
      findings.push(...(await deadLetterTopicFindings(admin, deadLetterTopic)));
    } else {
      findings.push({
        level: resolved.createDeadLetterTopic ? 'warn' : 'error',
        message: resolved.createDeadLetterTopic
          ? `dead-letter topic '${deadLetterTopic}' does not exist; the consumer creates it at start (needs CreateTopics permission)`
          : `dead-letter topic '${deadLetterTopic}' does not exist and createDeadLetterTopic is false: start() fails`,
      });
    }
    const group = await admin.groupState(groupId);
    if (group) {
      findings.push({
        level: 'ok',
        message: `group '${groupId}' is ${group.state} with ${group.members} member(s)`,
      });
    }
  } catch (error) {
    findings.push({
      level: 'error',
      message: `cluster ${resolved.kafka ? '(your broker.kafka client)' : resolved.platformatic && resolved.brokers.length === 0 ? '(your broker.platformatic clients)' : resolved.brokers.join(',')} did not answer: ${error instanceof Error ? error.message : String(error)}`,
    });
  } finally {
    await admin?.disconnect().catch(() => {});
  }
  return report;
}

/** Dead letters kept at least this long, or `oncely dlq` may never see some (14 days). */
const RECOMMENDED_DLQ_RETENTION_MS = 14 * 24 * 3600 * 1000;

/**
 * What the dead-letter topic's configs mean for `oncely dlq`: compaction keeps only the
 * last record of a key (older dead letters of that key vanish), and retention removes
 * letters nobody looked at without a trace.
 */
async function deadLetterTopicFindings(admin: ClusterAdmin, topic: string): Promise<DiagnoseFinding[]> {
  let configs: Map<string, string>;
  try {
    configs = await admin.topicConfigs(topic, ['cleanup.policy', 'retention.ms']);
  } catch (error) {
    return [
      {
        level: 'warn',
        message: `cannot read the configs of dead-letter topic '${topic}' (DescribeConfigs permission?): ${error instanceof Error ? error.message : String(error)}`,
      },
    ];
  }
  const findings: DiagnoseFinding[] = [];
  const policy = configs.get('cleanup.policy');
  if (policy?.split(',').some((p) => p.trim() === 'compact')) {
    findings.push({
      level: 'warn',
      message: `dead-letter topic '${topic}' is compacted (cleanup.policy ${policy}): compaction keeps only the last record of a key, so older dead letters of the same key disappear before oncely dlq sees them; use cleanup.policy delete`,
    });
  }
  const retention = Number(configs.get('retention.ms'));
  if (Number.isFinite(retention) && retention >= 0 && retention < RECOMMENDED_DLQ_RETENTION_MS) {
    findings.push({
      level: 'warn',
      message: `dead-letter topic '${topic}' keeps records ${formatHours(retention)} (retention.ms): a dead letter nobody replayed or discarded by then is gone without a trace; 14 days or more is recommended`,
    });
  } else if (retention < 0) {
    findings.push({
      level: 'ok',
      message: `dead-letter topic '${topic}' keeps records for ever (retention.ms -1)`,
    });
  } else if (Number.isFinite(retention)) {
    findings.push({
      level: 'ok',
      message: `dead-letter topic '${topic}' keeps records ${formatHours(retention)}`,
    });
  }
  return findings;
}

function formatHours(ms: number): string {
  const hours = ms / 3_600_000;
  return hours >= 48 ? `${Math.round(hours / 24)} d` : `${Math.round(hours * 10) / 10} h`;
}
