import {
  ChangeMessageVisibilityBatchCommand,
  ChangeMessageVisibilityCommand,
  DeleteMessageBatchCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  type MessageSystemAttributeName,
  ReceiveMessageCommand,
  SendMessageCommand,
  type SendMessageCommandInput,
  type SQSClient,
  type Message as SqsMessage,
} from '@aws-sdk/client-sqs';
import { BrokerMisconfiguredError } from '@oncely/core';
import { isQueueMissingError, toSettlementError } from './errors.js';

/** How long acks wait for company before one DeleteMessageBatch goes out. */
export const DELETE_BATCH_WINDOW_MS = 5;

/**
 * How long a visibility renewal waits for company before it goes out: the heartbeats of
 * messages received together fall due together, and share one ChangeMessageVisibilityBatch.
 */
export const RENEW_BATCH_WINDOW_MS = 5;

/** SQS accepts at most 10 entries per batch call. */
const BATCH_LIMIT = 10;

/** System attributes asked for on every receive. */
const SYSTEM_ATTRIBUTES: MessageSystemAttributeName[] = [
  'ApproximateReceiveCount',
  'MessageGroupId',
  'MessageDeduplicationId',
  'SequenceNumber',
];

/**
 * What a queue's attributes say about how Oncely must treat it (`adapter.facts` after start).
 *
 * @example
 * ```ts
 * if (adapter.facts?.fifo) console.log('FIFO queue, redrive:', adapter.facts.redrive);
 * ```
 */
export interface QueueFacts {
  arn?: string;
  fifo: boolean;
  contentBasedDeduplication: boolean;
  /** The queue's default visibility timeout. */
  visibilityTimeoutMs: number;
  /** The queue's `MaximumMessageSize` in bytes (body plus message attributes). */
  maximumMessageSize?: number;
  /** Native redrive, when the queue has a RedrivePolicy. */
  redrive?: { deadLetterTargetArn: string; maxReceiveCount: number };
}

interface PendingDelete {
  receiptHandle: string;
  resolve(): void;
  reject(error: Error): void;
}

interface PendingRenewal extends PendingDelete {
  seconds: number;
  signal?: AbortSignal;
}

/** What {@link SqsQueueClient.messageCount} adds up. */
const MESSAGE_COUNT_ATTRIBUTES = [
  'ApproximateNumberOfMessages',
  'ApproximateNumberOfMessagesNotVisible',
  'ApproximateNumberOfMessagesDelayed',
] as const;

/**
 * One queue's calls, with settlement errors mapped for the core: stale receipt handles
 * become `LeaseLostError`, everything else `SqsOperationError`. Deletes are batched: acks
 * arriving within a few milliseconds of each other share one `DeleteMessageBatch`, and a
 * per-entry `Failed[]` result rejects only that delivery's ack.
 *
 * @example
 * ```ts
 * const queue = new SqsQueueClient(client, queueUrl);
 * const { messages } = await queue.receive({ max: 10, visibilitySeconds: 30, waitSeconds: 20 });
 * await queue.delete(messages[0].ReceiptHandle!);
 * ```
 */
export class SqsQueueClient {
  private pending: PendingDelete[] = [];
  private timer: NodeJS.Timeout | undefined;
  private renewals: PendingRenewal[] = [];
  private renewTimer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    readonly client: SQSClient,
    readonly queueUrl: string,
  ) {}

  /** Reads the queue's attributes. Throws `BrokerMisconfiguredError` when the queue does not exist. */
  async facts(queueUrl = this.queueUrl): Promise<QueueFacts> {
    let attributes: Record<string, string>;
    try {
      const out = await this.client.send(
        new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['All'] }),
      );
      attributes = out.Attributes ?? {};
    } catch (error) {
      if (isQueueMissingError(error)) {
        throw new BrokerMisconfiguredError(`SQS queue ${queueUrl} does not exist`, { cause: error });
      }
      throw error;
    }
    return parseQueueFacts(attributes);
  }

  /**
   * Messages stored in a queue: visible, in flight (received and not deleted) and delayed,
   * one GetQueueAttributes call. SQS's own counts are approximate (eventually consistent,
   * about a minute behind at worst).
   */
  async messageCount(queueUrl: string, signal?: AbortSignal): Promise<number> {
    const out = await this.client.send(
      new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: [...MESSAGE_COUNT_ATTRIBUTES] }),
      { abortSignal: signal },
    );
    let total = 0;
    for (const name of MESSAGE_COUNT_ATTRIBUTES) {
      const value = Number(out.Attributes?.[name]);
      if (!Number.isFinite(value)) throw new Error(`SQS answered no ${name} for ${queueUrl}`);
      total += value;
    }
    return total;
  }

  /** Resolves a queue ARN (a redrive target) to its URL. */
  async urlOfArn(arn: string): Promise<string> {
    const [, , , , account, name] = arn.split(':');
    if (!name) throw new BrokerMisconfiguredError(`not an SQS queue ARN: ${arn}`);
    const out = await this.client.send(
      new GetQueueUrlCommand({ QueueName: name, QueueOwnerAWSAccountId: account }),
    );
    if (!out.QueueUrl) throw new BrokerMisconfiguredError(`SQS returned no URL for ${arn}`);
    return out.QueueUrl;
  }

  /** One long poll. `signal` aborts it (stop, pause). */
  async receive(options: {
    max: number;
    visibilitySeconds: number;
    waitSeconds: number;
    signal?: AbortSignal;
    /** @default ['All'] */
    attributeNames?: string[];
  }): Promise<SqsMessage[]> {
    const out = await this.client.send(
      new ReceiveMessageCommand({
        QueueUrl: this.queueUrl,
        MaxNumberOfMessages: options.max,
        WaitTimeSeconds: options.waitSeconds,
        VisibilityTimeout: options.visibilitySeconds,
        MessageSystemAttributeNames: SYSTEM_ATTRIBUTES,
        MessageAttributeNames: options.attributeNames ?? ['All'],
      }),
      { abortSignal: options.signal },
    );
    return out.Messages ?? [];
  }

  /** Sets the visibility timeout of one receipt handle, counted from now. */
  async changeVisibility(receiptHandle: string, seconds: number, signal?: AbortSignal): Promise<void> {
    try {
      await this.client.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: this.queueUrl,
          ReceiptHandle: receiptHandle,
          VisibilityTimeout: seconds,
        }),
        { abortSignal: signal },
      );
    } catch (error) {
      throw toSettlementError('ChangeMessageVisibility', error);
    }
  }

  /**
   * Renews one receipt's visibility (a heartbeat). Renewals arriving within a few
   * milliseconds of each other share one ChangeMessageVisibilityBatch (10 entries at most);
   * a lone one goes out as a plain ChangeMessageVisibility. A per-entry `Failed[]` result
   * rejects only that renewal (stale handle: `LeaseLostError`).
   */
  renewVisibility(receiptHandle: string, seconds: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.renewals.push({ receiptHandle, seconds, signal, resolve, reject });
      if (this.renewals.length >= BATCH_LIMIT) this.flushRenewals();
      else this.renewTimer ??= setTimeout(() => this.flushRenewals(), RENEW_BATCH_WINDOW_MS);
    });
  }

  private flushRenewals(): void {
    clearTimeout(this.renewTimer);
    this.renewTimer = undefined;
    while (this.renewals.length > 0) {
      const batch = this.renewals.splice(0, BATCH_LIMIT);
      if (batch.length === 1) {
        const [one] = batch as [PendingRenewal];
        this.changeVisibility(one.receiptHandle, one.seconds, one.signal).then(one.resolve, one.reject);
      } else {
        void this.renewBatch(batch);
      }
    }
  }

  private async renewBatch(batch: PendingRenewal[]): Promise<void> {
    try {
      const out = await this.client.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: batch.map((entry, index) => ({
            Id: String(index),
            ReceiptHandle: entry.receiptHandle,
            VisibilityTimeout: entry.seconds,
          })),
        }),
        // Given up only when every entry has given up.
        { abortSignal: anySignal(batch.map((entry) => entry.signal)) },
      );
      settleEntries('ChangeMessageVisibilityBatch', batch, out);
    } catch (error) {
      const mapped = toSettlementError('ChangeMessageVisibilityBatch', error);
      for (const entry of batch) entry.reject(mapped);
    }
  }

  /** Sends a message to another queue (the dead-letter queue). */
  async sendTo(input: SendMessageCommandInput): Promise<void> {
    try {
      await this.client.send(new SendMessageCommand(input));
    } catch (error) {
      throw toSettlementError('SendMessage (dead-letter)', error);
    }
  }

  /** Deletes one message at once, outside the batch (dead-lettering: rare, and its copy is already sent). */
  async deleteNow(receiptHandle: string): Promise<void> {
    try {
      await this.client.send(
        new DeleteMessageCommand({ QueueUrl: this.queueUrl, ReceiptHandle: receiptHandle }),
      );
    } catch (error) {
      throw toSettlementError('DeleteMessage', error);
    }
  }

  /** Deletes one message; batched with other deletes of the next few milliseconds. */
  delete(receiptHandle: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ receiptHandle, resolve, reject });
      if (this.pending.length >= BATCH_LIMIT) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), DELETE_BATCH_WINDOW_MS);
    });
  }

  /** Sends every waiting delete now and waits for all deletes in flight. */
  async drain(): Promise<void> {
    this.flushRenewals();
    this.flush();
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0, BATCH_LIMIT);
      const sending = this.deleteBatch(batch);
      this.inFlight.add(sending);
      void sending.finally(() => this.inFlight.delete(sending));
    }
  }

  private async deleteBatch(batch: PendingDelete[]): Promise<void> {
    try {
      const out = await this.client.send(
        new DeleteMessageBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: batch.map((entry, index) => ({ Id: String(index), ReceiptHandle: entry.receiptHandle })),
        }),
      );
      settleEntries('DeleteMessageBatch', batch, out);
    } catch (error) {
      const mapped = toSettlementError('DeleteMessageBatch', error);
      for (const entry of batch) entry.reject(mapped);
    }
  }
}

/** Resolves or rejects each entry of a batch call from its per-entry results. */
function settleEntries(
  operation: string,
  batch: PendingDelete[],
  out: {
    Failed?: Array<{ Id?: string; Code?: string; Message?: string }>;
    Successful?: Array<{ Id?: string }>;
  },
): void {
  const failed = new Map((out.Failed ?? []).map((entry) => [entry.Id, entry]));
  const succeeded = new Set((out.Successful ?? []).map((entry) => entry.Id));
  batch.forEach((entry, index) => {
    const failure = failed.get(String(index));
    if (failure) entry.reject(toSettlementError(operation, failure));
    else if (succeeded.has(String(index))) entry.resolve();
    else {
      entry.reject(
        toSettlementError(operation, {
          Code: 'MissingResult',
          Message: 'entry neither succeeded nor failed',
        }),
      );
    }
  });
}

/** Aborts once every given signal has aborted; undefined when any entry has none. */
function anySignal(signals: Array<AbortSignal | undefined>): AbortSignal | undefined {
  if (signals.some((signal) => signal === undefined)) return undefined;
  const controller = new AbortController();
  const all = signals as AbortSignal[];
  const check = () => {
    if (all.every((signal) => signal.aborted)) controller.abort();
  };
  for (const signal of all) signal.addEventListener('abort', check, { once: true });
  check();
  return controller.signal;
}

/** Interprets GetQueueAttributes output. */
export function parseQueueFacts(attributes: Record<string, string>): QueueFacts {
  let redrive: QueueFacts['redrive'];
  if (attributes.RedrivePolicy) {
    try {
      const policy = JSON.parse(attributes.RedrivePolicy) as {
        deadLetterTargetArn?: string;
        maxReceiveCount?: unknown;
      };
      const maxReceiveCount = Number(policy.maxReceiveCount);
      if (policy.deadLetterTargetArn && Number.isFinite(maxReceiveCount)) {
        redrive = { deadLetterTargetArn: policy.deadLetterTargetArn, maxReceiveCount };
      }
    } catch {
      // A policy SQS accepted is JSON; anything else is treated as no redrive.
    }
  }
  return {
    arn: attributes.QueueArn,
    fifo: attributes.FifoQueue === 'true',
    contentBasedDeduplication: attributes.ContentBasedDeduplication === 'true',
    visibilityTimeoutMs: Number(attributes.VisibilityTimeout ?? 30) * 1000,
    maximumMessageSize: attributes.MaximumMessageSize ? Number(attributes.MaximumMessageSize) : undefined,
    redrive,
  };
}
