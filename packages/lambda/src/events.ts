/**
 * The event shapes the handlers read, declared here so users need no `@types/aws-lambda`.
 * They match `SQSEvent`, `MSKEvent` and `SelfManagedKafkaEvent` from `@types/aws-lambda`
 * (the tests check that those types are assignable to these).
 */

/**
 * One SQS record as the event source mapping delivers it.
 *
 * @example
 * ```ts
 * const record: SqsRecordLike = event.Records[0];
 * ```
 */
export interface SqsRecordLike {
  messageId: string;
  body: string;
  attributes: {
    ApproximateReceiveCount?: string;
    MessageGroupId?: string;
    MessageDeduplicationId?: string;
    SequenceNumber?: string;
  };
  messageAttributes?: Record<string, { stringValue?: string | undefined; dataType?: string }>;
  eventSourceARN: string;
  eventSource?: string;
}

/**
 * The SQS event.
 *
 * @example
 * ```ts
 * const response = await handler({ Records: [record] } satisfies SqsEventLike);
 * ```
 */
export interface SqsEventLike {
  Records: SqsRecordLike[];
}

/**
 * The SQS partial batch response (`ReportBatchItemFailures`): the `messageId` of each
 * record to retry.
 *
 * @example
 * ```ts
 * const response: BatchResponse = { batchItemFailures: [{ itemIdentifier: record.messageId }] };
 * ```
 */
export interface BatchResponse {
  batchItemFailures: Array<{ itemIdentifier: string }>;
}

/**
 * A record in the Kafka partial batch response: `partition` is the record's key in the
 * event's `records` map (`<topic>-<partition>`), `offset` its offset. The shape the AWS
 * Lambda documentation gives for MSK and self-managed Kafka event sources, as Powertools
 * for AWS Lambda (Python) and the Rust runtime send it.
 *
 * @example
 * ```ts
 * const failed: KafkaItemIdentifier = { partition: 'orders-0', offset: 15 };
 * ```
 */
export interface KafkaItemIdentifier {
  partition: string;
  offset: number;
}

/**
 * The Kafka partial batch response (`ReportBatchItemFailures` on an MSK or self-managed
 * Kafka event source mapping).
 *
 * @example
 * ```ts
 * const response: KafkaBatchResponse = {
 *   batchItemFailures: [{ itemIdentifier: { partition: 'orders-0', offset: 15 } }],
 * };
 * ```
 */
export interface KafkaBatchResponse {
  batchItemFailures: Array<{ itemIdentifier: KafkaItemIdentifier }>;
}

/**
 * One Kafka record: key and value base64, header values as byte arrays.
 *
 * @example
 * ```ts
 * const value = JSON.parse(Buffer.from(record.value ?? '', 'base64').toString());
 * ```
 */
export interface KafkaRecordLike {
  topic: string;
  partition: number;
  offset: number;
  timestamp?: number;
  key?: string;
  value?: string;
  headers?: Array<Record<string, number[]>>;
}

/**
 * An MSK or self-managed Kafka event: records grouped by `topic-partition`.
 *
 * @example
 * ```ts
 * const all = Object.values(event.records).flat();
 * ```
 */
export interface KafkaEventLike {
  eventSource?: string;
  records: Record<string, KafkaRecordLike[]>;
}
