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
 * The partial batch response (`ReportBatchItemFailures`).
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
