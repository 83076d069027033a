import { BatchFailedError, InvalidEventError } from './errors.js';
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
    // A non-object record cannot run (it has no body, no ID): it fails, logged, and the rest run.
    const records = event.Records.map((record, index): PreparedRecord | undefined => {
      if (typeof record === 'object' && record !== null) return prepareSqsRecord(record);
      runner.log.error(
        `oncely/lambda: Records[${index}] is not an SQS record (${record === null ? 'null' : typeof record}); it is not run and fails the batch`,
        { consumer: options.name, reason: 'invalid-record' },
      );
      return undefined;
    });
    const fifo = records.some((record) => {
      const source: unknown = record?.envelope.source;
      return typeof source === 'string' && source.endsWith('.fifo');
    });
    const deadline = runner.deadline(context);
    try {
      const outcomes: RecordOutcome[] = [];
      const runnable = records.filter((record): record is PreparedRecord => record !== undefined);
      if (!fifo && options.batch && runnable.length > 1) {
        const ran = await runner.runBatch(runnable, deadline);
        for (const record of records) outcomes.push(record ? ran[runnable.indexOf(record)]! : 'failed');
      } else {
        const stoppedGroups = new Set<string>();
        let stoppedAll = false;
        for (const record of records) {
          // Out of time or out of store: what was not run comes back later, untouched.
          if (deadline.signal.aborted) stoppedAll = true;
          if (stoppedAll || (fifo && stoppedGroups.has(record?.group ?? ''))) {
            outcomes.push('skipped');
            continue;
          }
          if (!record) {
            outcomes.push('failed');
            // Its group is unknown: on FIFO, nothing after it may run before it.
            if (fifo) stoppedAll = true;
            continue;
          }
          const outcome = await runner.runOne(record, deadline.signal);
          outcomes.push(outcome);
          if (outcome === 'unavailable') stoppedAll = true;
          if (fifo && outcome === 'failed') {
            if (stopScope === 'batch') stoppedAll = true;
            else stoppedGroups.add(record.group ?? '');
          }
        }
      }
      const retried = records
        .map((record, index) => ({ record, index, outcome: outcomes[index] }))
        .filter(({ outcome }) => outcome !== 'processed' && outcome !== 'duplicate');
      const unnamed = retried.filter(({ record }) => !isMessageId(record?.itemIdentifier));
      if (unnamed.length > 0) {
        // AWS: an itemIdentifier that is null, empty or not a message ID of the batch makes
        // Lambda treat the whole batch as failed. Said and done explicitly, not through an
        // identifier Lambda has to reject.
        const names = retried.map(({ record, index }) =>
          isMessageId(record?.itemIdentifier) ? record.itemIdentifier : `Records[${index}] (no messageId)`,
        );
        runner.log.error(
          `oncely/lambda: ${unnamed.length} record(s) to retry have no messageId, so the partial batch response cannot name them (AWS Lambda fails the whole batch for an item without an identifier): the whole batch is failed; records that committed are skipped as duplicates when it comes back`,
          { consumer: options.name, failed: names, reason: 'unidentified-record' },
        );
        throw new BatchFailedError(names);
      }
      return {
        batchItemFailures: retried.map(({ record }) => ({ itemIdentifier: record!.itemIdentifier })),
      };
    } finally {
      deadline.dispose();
    }
  };
}

function isMessageId(value: unknown): value is string {
  return typeof value === 'string' && value !== '';
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
    // SQS always sends the body as a string; anything else is a malformed record, never
    // handed to a handler as its "decoded" body (core passes non-text values through).
    ...(typeof record.body === 'string'
      ? {}
      : {
          invalidBody: `the SQS record's body is ${record.body === null ? 'null' : typeof record.body}, not a string`,
        }),
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
