import { InvalidEventError } from './errors.js';
import type { BatchResponse, SqsEventLike, SqsRecordLike } from './events.js';
import type {
  LambdaContextLike,
  LambdaHandlerOptions,
  PreparedRecord,
  RecordOutcome,
} from './RecordRunner.js';
import { RecordRunner } from './RecordRunner.js';

/**
 * Options of {@link sqsHandler}.
 *
 * @example
 * ```ts
 * const options: SqsHandlerOptions = { name: 'payments', store, handler, batch: true };
 * ```
 */
export interface SqsHandlerOptions<TBody = unknown> extends LambdaHandlerOptions<TBody> {
  /**
   * Standard queues: run the batch in one transaction with one claim statement, each
   * record under its own savepoint when one fails (see `processBatchOnce`). Near the
   * invocation's deadline it runs in rounds that each commit what ran (a round stops
   * starting records at half the time left before `ctx.signal` aborts), so what fits
   * commits and only the rest is reported. FIFO queues always run record by record, to
   * keep group order.
   * @default false
   */
  batch?: boolean;
  /**
   * FIFO queues, after a record fails: `'batch'` reports it and every later record failed
   * without running them (what the AWS documentation prescribes); `'group'` does so only
   * for later records of the same message group and keeps processing the other groups.
   * @default 'batch'
   */
  fifoStopOnFailure?: 'batch' | 'group';
}

/**
 * An AWS Lambda handler for an SQS event source mapping with `ReportBatchItemFailures`
 * enabled. Each record runs once: its processed marker and the handler's `ctx.tx` writes
 * commit in one transaction; a duplicate (a retried batch, a redelivery) is skipped and
 * counts as a success. The response lists only the records that failed, so only those
 * come back.
 *
 * @example
 * ```ts
 * const store = new PostgresStore({ connectionString: process.env.DATABASE_URL });
 * export const handler = sqsHandler({
 *   name: 'payments',
 *   store,
 *   idStrategy: { attribute: 'message-id' },
 *   handler: async (message, ctx) => {
 *     await ctx.tx.query('INSERT INTO payments(order_id, amount) VALUES ($1, $2)', [message.body.orderId, 40]);
 *   },
 * });
 * ```
 */
export function sqsHandler<TBody = unknown>(
  options: SqsHandlerOptions<TBody>,
): (event: SqsEventLike, context?: LambdaContextLike) => Promise<BatchResponse> {
  const runner = new RecordRunner(options, 'sqs');
  const stopScope = options.fifoStopOnFailure ?? 'batch';
  return async (event, context) => {
    if (!event || !Array.isArray(event.Records)) {
      throw new InvalidEventError('sqsHandler expects an SQS event ({ Records: [...] })');
    }
    const records = event.Records.map(prepareSqsRecord);
    const fifo = event.Records.some((record) => record.eventSourceARN?.endsWith('.fifo'));
    const deadline = runner.deadline(context);
    try {
      let outcomes: RecordOutcome[];
      if (!fifo && options.batch && records.length > 1) {
        outcomes = await runner.runBatch(records, deadline);
      } else {
        outcomes = [];
        const stoppedGroups = new Set<string>();
        let stoppedAll = false;
        for (const record of records) {
          const group = record.group ?? '';
          // Out of time or out of store: what was not run comes back later, untouched.
          if (deadline.signal.aborted) stoppedAll = true;
          if (stoppedAll || (fifo && stoppedGroups.has(group))) {
            outcomes.push('skipped');
            continue;
          }
          const outcome = await runner.runOne(record, deadline.signal);
          outcomes.push(outcome);
          if (outcome === 'unavailable') stoppedAll = true;
          if (fifo && outcome === 'failed') {
            if (stopScope === 'batch') stoppedAll = true;
            else stoppedGroups.add(group);
          }
        }
      }
      return {
        batchItemFailures: records
          .filter((_, i) => outcomes[i] !== 'processed' && outcomes[i] !== 'duplicate')
          .map((record) => ({ itemIdentifier: record.itemIdentifier })),
      };
    } finally {
      deadline.dispose();
    }
  };
}

/**
 * The SQS record as the core's envelope (the same fields the SQS adapter maps).
 *
 * @example
 * ```ts
 * const { envelope, itemIdentifier } = prepareSqsRecord(event.Records[0]);
 * ```
 */
export function prepareSqsRecord(record: SqsRecordLike): PreparedRecord {
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(record.messageAttributes ?? {})) {
    if (value?.stringValue !== undefined) attributes[name] = value.stringValue;
  }
  const receiveCount = Number(record.attributes?.ApproximateReceiveCount);
  return {
    itemIdentifier: record.messageId,
    group: record.attributes?.MessageGroupId,
    receiveCount: Number.isFinite(receiveCount) && receiveCount > 0 ? receiveCount : undefined,
    envelope: {
      body: record.body,
      attributes,
      brokerMessageId: record.messageId,
      deduplicationId: record.attributes?.MessageDeduplicationId,
      deliveryCount: Number.isFinite(receiveCount) ? receiveCount : undefined,
      orderingKey: record.attributes?.MessageGroupId,
      sequence: record.attributes?.SequenceNumber,
      source: record.eventSourceARN,
      raw: record,
    },
  };
}
