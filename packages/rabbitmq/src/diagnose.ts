import { type ConsumerConfig, type DiagnoseFinding, type DiagnoseReport, isOncelyError } from '@oncely/core';
import { type ChannelModel, connect } from 'amqplib';
import { closeQuietly } from './closeQuietly.js';
import { consumerTimeoutFindings, isAtLeast } from './consumerTimeout.js';
import { AMQP_NOT_FOUND, amqpReplyCode } from './errors.js';
import { parseBrokerOptions, type ResolvedOptions } from './options.js';
import { delayQueueName } from './topology.js';

/**
 * Checks a RabbitMQ consumer config against the live broker, for `oncely doctor`: the
 * options, the connection, that the queue and dead-letter exchange exist, the
 * consumer-timeout budget, and the retry mode's trade-offs. Never throws: every problem
 * is a finding.
 *
 * @example
 * ```ts
 * const report = await diagnose({ name: 'payments', broker: { type: 'rabbitmq', url, queue: 'payments' }, store, handler });
 * for (const f of report.findings) console.log(f.level, f.message);
 * ```
 */
export async function diagnose(config: ConsumerConfig<any, any>): Promise<DiagnoseReport> {
  const findings: DiagnoseFinding[] = [];
  const report: DiagnoseReport = { broker: 'rabbitmq', findings };
  let options: ResolvedOptions;
  try {
    options = parseBrokerOptions(config.broker as unknown as Record<string, unknown>);
  } catch (error) {
    findings.push({ level: 'error', message: errorText(error) });
    return report;
  }
  const concurrency = config.concurrency ?? 1;
  const prefetch = options.prefetch ?? concurrency;
  const maxAttempts = config.maxAttempts ?? 5;

  let connection: ChannelModel | undefined;
  const refused: string[] = [];
  for (const url of options.urls) {
    try {
      connection = await connect(url, {
        ...options.socketOptions,
        clientProperties: { connection_name: `oncely-doctor:${config.name}` },
      });
      connection.on('error', () => {});
      break;
    } catch (error) {
      refused.push(errorText(error));
    }
  }
  if (!connection) {
    findings.push({ level: 'error', message: `cannot connect to RabbitMQ: ${refused.join('; ')}` });
    return report;
  }
  if (refused.length > 0) {
    findings.push({
      level: 'warn',
      message: `${refused.length} of ${options.urls.length} URLs refused: ${refused.join('; ')}`,
    });
  }
  try {
    const version = (connection.connection as { serverProperties?: { version?: unknown } }).serverProperties
      ?.version;
    const serverVersion =
      typeof version === 'string' ? version : Buffer.isBuffer(version) ? version.toString() : undefined;
    findings.push({ level: 'ok', message: `connected to RabbitMQ ${serverVersion ?? '(unknown version)'}` });

    const queue = await check(connection, (channel) => channel.checkQueue(options.queue));
    if (queue.ok) {
      const { messageCount, consumerCount } = queue.value;
      findings.push({
        level: 'ok',
        message: `queue '${options.queue}' exists (${messageCount} ready, ${consumerCount} consumers)`,
      });
    } else {
      findings.push({
        level: options.assertQueue ? 'warn' : 'error',
        message: options.assertQueue
          ? `queue '${options.queue}' does not exist yet; the consumer declares it at start (assertQueue)`
          : `queue '${options.queue}' does not exist and assertQueue is false: ${queue.error}`,
      });
    }
    const dlx = await check(connection, (channel) => channel.checkExchange(options.deadLetterExchange));
    if (dlx.ok)
      findings.push({ level: 'ok', message: `dead-letter exchange '${options.deadLetterExchange}' exists` });
    else {
      findings.push({
        level: options.assertQueue ? 'warn' : 'error',
        message: `dead-letter exchange '${options.deadLetterExchange}' does not exist${options.assertQueue ? ' yet; the consumer declares it at start' : ': dead-lettering would fail'}`,
      });
    }
    if (options.retry === 'topology') {
      for (const delay of options.retryDelaysMs ?? []) {
        const name = delayQueueName(options.queue, delay);
        const found = await check(connection, (channel) => channel.checkQueue(name));
        if (!found.ok && !options.assertQueue) {
          findings.push({
            level: 'error',
            message: `delay queue '${name}' does not exist: retries after ${delay} ms would fail`,
          });
        }
      }
      findings.push({
        level: 'ok',
        message:
          "retry: 'topology': failed messages wait in per-delay TTL queues and return to the back of the queue, so the queue keeps no order",
      });
    } else {
      findings.push({
        level: 'warn',
        message: `retry: 'requeue': failed messages return at once with no backoff (up to maxAttempts ${maxAttempts} immediate redeliveries)`,
      });
    }
    findings.push(
      ...consumerTimeoutFindings({
        consumerTimeoutMs: options.consumerTimeoutMs,
        handlerTimeoutMs: config.handlerTimeoutMs ?? 30_000,
        outageHoldMs: config.outageHoldMs ?? 60_000,
        prefetch,
        concurrency,
        queueType: options.queueType,
        serverVersion,
      }),
    );
    if (prefetch < concurrency) {
      findings.push({
        level: 'warn',
        message: `prefetch ${prefetch} is below concurrency ${concurrency}: at most ${prefetch} handlers ever run`,
      });
    }
    if (options.queueType === 'quorum') {
      if (options.deliveryLimit !== undefined && options.deliveryLimit <= maxAttempts) {
        findings.push({
          level: 'warn',
          message: `deliveryLimit ${options.deliveryLimit} is not above maxAttempts ${maxAttempts}: the broker may dead-letter (without a reason) before the consumer does`,
        });
      }
      if (!isAtLeast(serverVersion, [4, 3])) {
        findings.push({
          level: 'ok',
          message: `RabbitMQ ${serverVersion ?? ''} counts every requeue toward x-delivery-count (4.3+ no longer counts basic.nack): releases at stop or during a store outage use up attempts`,
        });
      }
    } else {
      findings.push({
        level: 'ok',
        message:
          'classic queue: no broker delivery count; attempts come from the x-oncely-attempts header of retry copies and, after a crash, from the store',
      });
    }
  } catch (error) {
    findings.push({ level: 'error', message: `checking RabbitMQ failed: ${errorText(error)}` });
  } finally {
    await closeQuietly(connection);
  }
  return report;
}

type CheckResult<T> = { ok: true; value: T } | { ok: false; error: string };

/** Runs one passive check on its own channel (a 404 closes the channel). */
async function check<T>(
  connection: ChannelModel,
  work: (channel: Awaited<ReturnType<ChannelModel['createChannel']>>) => Promise<T>,
): Promise<CheckResult<T>> {
  const channel = await connection.createChannel();
  channel.on('error', () => {});
  try {
    return { ok: true, value: await work(channel) };
  } catch (error) {
    if (amqpReplyCode(error) === AMQP_NOT_FOUND) return { ok: false, error: errorText(error) };
    throw error;
  } finally {
    await closeQuietly(channel);
  }
}

function errorText(error: unknown): string {
  if (isOncelyError(error)) return error.message;
  return error instanceof Error ? error.message : String(error);
}
