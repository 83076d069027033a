import { randomUUID } from 'node:crypto';
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { PostgresStore } from '@oncely/postgres';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { type FauxqsServer, startFauxqs } from 'fauxqs';
import pg from 'pg';

export const connectionString = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const admin = new pg.Pool({ connectionString, max: 2 });
admin.on('error', () => {});

/** True when PostgreSQL answers; under CI=true a missing server fails the run. */
export async function postgresAvailable(): Promise<boolean> {
  try {
    await admin.query('SELECT 1');
    return true;
  } catch (error) {
    if (process.env.CI === 'true') throw new Error('PostgreSQL is required under CI=true', { cause: error });
    console.warn(`[oncely lambda tests] PostgreSQL not reachable (${(error as Error).message}); skipping`);
    return false;
  }
}

export function uniqueSchema(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
}

/** A migrated store with an `effects` table: one row per applied effect (no unique key, so doubles show). */
export async function openStore(kind: 'postgres' | 'pglite', schema: string): Promise<PostgresStore> {
  const store =
    kind === 'postgres'
      ? new PostgresStore({ connectionString, schema })
      : PostgresStore.embedded({ schema });
  await store.migrate();
  await store.transaction((tx) =>
    tx.query(
      `CREATE TABLE "${schema}".effects (n bigserial PRIMARY KEY, message_id text NOT NULL, grp text)`,
    ),
  );
  return store;
}

export async function effects(
  store: PostgresStore,
  schema: string,
): Promise<Array<{ message_id: string; grp: string | null }>> {
  const { rows } = await store.transaction((tx) =>
    tx.query<{ message_id: string; grp: string | null }>(
      `SELECT message_id, grp FROM "${schema}".effects ORDER BY n`,
    ),
  );
  return rows;
}

/** fauxqs, the SQS emulator the SQS adapter's tests use, in-process. */
export async function startSqs(): Promise<{
  server: FauxqsServer;
  client: SQSClient;
  stop(): Promise<void>;
}> {
  const server = await startFauxqs({ port: 0, logger: false });
  const client = new SQSClient({
    endpoint: server.address,
    region: 'us-east-1',
    credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
  });
  return {
    server,
    client,
    stop: async () => {
      client.destroy();
      await server.stop();
    },
  };
}

export async function createQueue(client: SQSClient, fifo: boolean): Promise<{ url: string; arn: string }> {
  const name = `lambda-${randomUUID().slice(0, 8)}${fifo ? '.fifo' : ''}`;
  const out = await client.send(
    new CreateQueueCommand({
      QueueName: name,
      Attributes: { VisibilityTimeout: '1', ...(fifo ? { FifoQueue: 'true' } : {}) },
    }),
  );
  const attrs = await client.send(
    new GetQueueAttributesCommand({ QueueUrl: out.QueueUrl, AttributeNames: ['QueueArn'] }),
  );
  return { url: out.QueueUrl!, arn: attrs.Attributes!.QueueArn! };
}

export async function sendMessages(
  client: SQSClient,
  queueUrl: string,
  messages: Array<{ id?: string; body: unknown; group?: string }>,
): Promise<void> {
  for (let i = 0; i < messages.length; i += 10) {
    const chunk = messages.slice(i, i + 10);
    await client.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: chunk.map((message, j) => ({
          Id: String(j),
          MessageBody: JSON.stringify(message.body),
          MessageAttributes: message.id
            ? { 'message-id': { DataType: 'String', StringValue: message.id } }
            : undefined,
          MessageGroupId: message.group,
          MessageDeduplicationId: message.group ? `${message.id ?? randomUUID()}` : undefined,
        })),
      }),
    );
  }
}

/** An SQS record exactly as the event source mapping builds it from a received message. */
export function toSqsRecord(message: Message, arn: string): SQSRecord {
  const attributes = message.Attributes ?? {};
  return {
    messageId: message.MessageId!,
    receiptHandle: message.ReceiptHandle!,
    body: message.Body ?? '',
    attributes: {
      ApproximateReceiveCount: attributes.ApproximateReceiveCount ?? '1',
      SentTimestamp: attributes.SentTimestamp ?? String(Date.now()),
      SenderId: attributes.SenderId ?? 'AIDAIENQZJOLO23YVJ4VO',
      ApproximateFirstReceiveTimestamp: attributes.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
      ...(attributes.MessageGroupId
        ? {
            MessageGroupId: attributes.MessageGroupId,
            MessageDeduplicationId: attributes.MessageDeduplicationId,
            SequenceNumber: attributes.SequenceNumber,
          }
        : {}),
    },
    messageAttributes: Object.fromEntries(
      Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [
        name,
        {
          stringValue: value.StringValue,
          stringListValues: [],
          binaryListValues: [],
          dataType: value.DataType!,
        },
      ]),
    ),
    md5OfBody: message.MD5OfBody ?? '',
    eventSource: 'aws:sqs',
    eventSourceARN: arn,
    awsRegion: 'us-east-1',
  };
}

/**
 * Plays the SQS event source mapping: receives a batch, invokes the function with the event,
 * deletes the records that were not reported failed (all of them when the invocation
 * failed: nothing), and leaves the rest to come back after the visibility timeout.
 */
export class SqsEventSourceMapping {
  readonly invocations: Array<{ event: SQSEvent; response?: SQSBatchResponse; error?: unknown }> = [];
  constructor(
    private readonly client: SQSClient,
    private readonly queue: { url: string; arn: string },
    private readonly fn: (
      event: SQSEvent,
      context: { getRemainingTimeInMillis(): number },
    ) => Promise<SQSBatchResponse>,
    private readonly batchSize = 10,
    /** The function's configured timeout: each invocation's context counts down from it. */
    private readonly timeoutMs = 30_000,
  ) {}

  /** One poll and invocation; returns how many records the batch had. */
  async pollOnce(): Promise<number> {
    const received = await this.client.send(
      new ReceiveMessageCommand({
        QueueUrl: this.queue.url,
        MaxNumberOfMessages: this.batchSize,
        WaitTimeSeconds: 1,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['All'],
      }),
    );
    const messages = received.Messages ?? [];
    if (messages.length === 0) return 0;
    const event: SQSEvent = { Records: messages.map((message) => toSqsRecord(message, this.queue.arn)) };
    const invocation: (typeof this.invocations)[number] = { event };
    this.invocations.push(invocation);
    let failed: Set<string>;
    try {
      const invokedAt = Date.now();
      invocation.response = await this.fn(event, {
        getRemainingTimeInMillis: () => Math.max(0, invokedAt + this.timeoutMs - Date.now()),
      });
      failed = new Set((invocation.response?.batchItemFailures ?? []).map((f) => f.itemIdentifier));
    } catch (error) {
      invocation.error = error;
      failed = new Set(messages.map((message) => message.MessageId!));
    }
    const done = messages.filter((message) => !failed.has(message.MessageId!));
    if (done.length > 0) {
      await this.client.send(
        new DeleteMessageBatchCommand({
          QueueUrl: this.queue.url,
          Entries: done.map((message, i) => ({ Id: String(i), ReceiptHandle: message.ReceiptHandle! })),
        }),
      );
    }
    // Failed records come back after the visibility timeout (1 s on these queues), as with the real mapping.
    return messages.length;
  }

  /** Polls until `done()` holds or the deadline passes. */
  async runUntil(done: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await done())) {
      if (Date.now() > deadline) throw new Error('the mapping did not drain the queue in time');
      await this.pollOnce();
    }
  }
}
