/**
 * The event shapes the handlers read, declared here so users need no `@types/aws-lambda`.
 * They match `SQSEvent`, `MSKEvent` and `SelfManagedKafkaEvent` from `@types/aws-lambda`
 * (the tests check that those types are assignable to these).
 */

/** One SQS record as the event source mapping delivers it. */
export interface SqsRecordLike {
  messageId: string;
  body: string;
  attributes: {
    ApproximateReceiveCount?: string;
    MessageGroupId?: string;
    MessageDeduplicationId?: string;
    SequenceNumber?: string;
    [name: string]: string | undefined;
  };
  messageAttributes?: Record<string, { stringValue?: string | undefined; dataType?: string }>;
  eventSourceARN: string;
  eventSource?: string;
}

/** The SQS event. */
export interface SqsEventLike {
  Records: SqsRecordLike[];
}

/** The partial batch response (`ReportBatchItemFailures`). */
export interface BatchResponse {
  batchItemFailures: Array<{ itemIdentifier: string }>;
}

/** One Kafka record: key and value base64, header values as byte arrays. */
export interface KafkaRecordLike {
  topic: string;
  partition: number;
  offset: number;
  timestamp?: number;
  key?: string;
  value?: string;
  headers?: Array<Record<string, number[]>>;
}

/** An MSK or self-managed Kafka event: records grouped by `topic-partition`. */
export interface KafkaEventLike {
  eventSource?: string;
  records: Record<string, KafkaRecordLike[]>;
}
