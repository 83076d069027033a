import { BatchFailedError, InvalidEventError } from './errors.js';
import type { KafkaBatchResponse, KafkaEventLike, KafkaItemIdentifier, KafkaRecordLike } from './events.js';
import type {
  LambdaContextLike,
  LambdaHandlerOptions,
  PreparedRecord,
  RecordOutcome,
} from './RecordRunner.js';
import { RecordRunner } from './RecordRunner.js';

/**
 * Options of {@link kafkaHandler}.
 *
 * @example
 * ```ts
 * const options: KafkaHandlerOptions = { name: 'orders', store, handler, idStrategy: 'broker' };
 * ```
 */
export interface KafkaHandlerOptions<TBody = unknown> extends LambdaHandlerOptions<TBody> {
  /**
   * How failed records are reported. `'throw'`: the invocation fails with
   * {@link BatchFailedError} and Lambda retries the whole batch; records that committed are
   * skipped as duplicates on the retry (works with every event source mapping mode).
   * `'report'`: returns the Kafka partial batch response, `batchItemFailures` with
   * `itemIdentifier: { partition: '<topic>-<partition>', offset }` for each failed or
   * not-run record (needs `ReportBatchItemFailures` on the mapping, which AWS offers for
   * Kafka in provisioned mode).
   * @default 'throw'
   */
  failureReport?: 'throw' | 'report';
}

/**
 * An AWS Lambda handler for Amazon MSK and self-managed Kafka event sources. Records run
 * once each, partition by partition in offset order; after a record fails, the later
 * records of its partition are not run (they would overtake it), other partitions go on.
 *
 * @example
 * ```ts
 * export const handler = kafkaHandler({
 *   name: 'orders',
 *   store,
 *   idStrategy: 'broker', // topic/partition/offset: catches the mapping's retries only
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO orders(id) VALUES ($1)', [message.body.id]);
 *   },
 * });
 * ```
 */
export function kafkaHandler<TBody = unknown>(
  options: KafkaHandlerOptions<TBody>,
): (event: KafkaEventLike, context?: LambdaContextLike) => Promise<KafkaBatchResponse> {
  const runner = new RecordRunner(options, 'kafka');
  const report = options.failureReport ?? 'throw';
  return async (event, context) => {
    if (!event || typeof event.records !== 'object' || event.records === null) {
      throw new InvalidEventError(
        'kafkaHandler expects an MSK or self-managed Kafka event ({ records: { ... } })',
      );
    }
    // The mapping lists each topic-partition's records in offset order; that order is kept.
    // A non-object record cannot run nor be named in a report: it fails its partition and
    // then the whole batch (below).
    const records = Object.entries(event.records).flatMap(([topicPartition, list]) =>
      (Array.isArray(list) ? list : [list]).map(
        (record: unknown, index): PreparedRecord<KafkaItemIdentifier> | Unnamed => {
          if (typeof record === 'object' && record !== null)
            return prepareKafkaRecord(record as KafkaRecordLike);
          const label = `records[${JSON.stringify(topicPartition)}][${index}]`;
          runner.log.error(
            `oncely/lambda: ${label} is not a Kafka record (${record === null ? 'null' : typeof record}); it is not run and fails the batch`,
            { consumer: options.name, reason: 'invalid-record' },
          );
          return { unnamed: label, group: topicPartition };
        },
      ),
    );
    const deadline = runner.deadline(context);
    try {
      const outcomes: RecordOutcome[] = [];
      const stopped = new Set<string>();
      let stoppedAll = false;
      for (const record of records) {
        // Out of time or out of store: what was not run comes back later, untouched.
        if (deadline.signal.aborted) stoppedAll = true;
        if (stoppedAll || stopped.has(record.group!)) {
          outcomes.push('skipped');
          continue;
        }
        if ('unnamed' in record) {
          outcomes.push('failed');
          stopped.add(record.group);
          continue;
        }
        const outcome = await runner.runOne(record, deadline.signal);
        outcomes.push(outcome);
        if (outcome === 'unavailable') stoppedAll = true;
        if (outcome === 'failed') stopped.add(record.group!);
      }
      const retried = records.filter((_, i) => outcomes[i] !== 'processed' && outcomes[i] !== 'duplicate');
      if (retried.some((record) => 'unnamed' in record)) {
        // As for SQS: an item the partial batch response cannot name fails the whole batch.
        const names = retried.map((record) =>
          'unnamed' in record
            ? record.unnamed
            : `${record.itemIdentifier.partition}-${record.itemIdentifier.offset}`,
        );
        runner.log.error(
          'oncely/lambda: records to retry include one that is not a Kafka record, which no report can name: the whole batch is failed; records that committed are skipped as duplicates when it comes back',
          { consumer: options.name, failed: names, reason: 'unidentified-record' },
        );
        throw new BatchFailedError(names);
      }
      const failed = (retried as Array<PreparedRecord<KafkaItemIdentifier>>).map(
        (record) => record.itemIdentifier,
      );
      if (failed.length > 0 && report === 'throw') {
        throw new BatchFailedError(failed.map(({ partition, offset }) => `${partition}-${offset}`));
      }
      return { batchItemFailures: failed.map((itemIdentifier) => ({ itemIdentifier })) };
    } finally {
      deadline.dispose();
    }
  };
}

/** A record of the event that is not one (null, a number): it has a place, no identity. */
interface Unnamed {
  unnamed: string;
  group: string;
}

/**
 * A Kafka record of the event as the core's envelope: value and key are base64, header values byte arrays.
 *
 * @example
 * ```ts
 * const { envelope } = prepareKafkaRecord(event.records['orders-0'][0]);
 * ```
 */
export function prepareKafkaRecord(record: KafkaRecordLike): PreparedRecord<KafkaItemIdentifier> {
  const attributes: Record<string, string> = {};
  for (const header of record.headers ?? []) {
    for (const [name, bytes] of Object.entries(header))
      attributes[name] = Buffer.from(bytes).toString('utf8');
  }
  const offset = String(record.offset);
  // The key of the record's list in the event's `records` map, as the mapping builds it.
  const topicPartition = `${record.topic}-${record.partition}`;
  return {
    itemIdentifier: { partition: topicPartition, offset: Number(record.offset) },
    group: topicPartition,
    envelope: {
      body: record.value === undefined || record.value === null ? '' : Buffer.from(record.value, 'base64'),
      attributes,
      brokerMessageId: `${record.topic}/${record.partition}/${offset}`,
      orderingKey: record.key ? Buffer.from(record.key, 'base64').toString('utf8') : undefined,
      sequence: offset,
      source: record.topic,
      offset: { topic: record.topic, partition: record.partition, offset },
      raw: record,
    },
  };
}
