import {
  GetQueueUrlCommand,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { OutboxMessage, OutboxProducer, OutboxSendResult } from '@oncely/core';
import { ConfigError } from '@oncely/core';
import { SqsOperationError, sqsErrorCode } from './errors.js';
import { toSendInput } from './sendMessage.js';

/** SendMessageBatch takes at most 10 entries. */
const MAX_BATCH = 10;
/** SQS's limit on a SendMessageBatch's payload (the bodies and attributes together). */
const MAX_BATCH_BYTES = 1_048_576;

/**
 * Options of {@link createSqsProducer}.
 *
 * @example
 * ```ts
 * createSqsProducer({ client: new SQSClient({}), queueUrl: (destination) => urls[destination] });
 * ```
 */
export interface SqsProducerOptions {
  /** Your SQS client; the producer never destroys it. */
  client: SQSClient;
  /**
   * The queue URL of a destination. @default the destination itself when it is an
   * `http(s)://` URL, else `GetQueueUrl` of the destination as a queue name (cached)
   */
  queueUrl?: (destination: string) => string | Promise<string>;
}

/**
 * The outbox producer for SQS: `SendMessageBatch` per queue (10 entries a call), each
 * message with the row's ID in the `message-id` attribute (what the SQS consumer's default
 * ID strategy reads), built by the same code as {@link sendMessage}. On a FIFO queue the
 * row's key is the `MessageGroupId` (a FIFO row without a key is refused) and its ID the
 * deduplication ID. An entry SQS refuses as the sender's fault is reported as permanent
 * (the relay dead-letters it); other failures are retried by the relay.
 *
 * @example
 * ```ts
 * import { createRelay } from '@oncely/postgres';
 * import { createSqsProducer } from '@oncely/sqs';
 *
 * const relay = createRelay({ store, producers: { 'payments-made': createSqsProducer({ client }) } });
 * await relay.start();
 * ```
 */
export function createSqsProducer(options: SqsProducerOptions): OutboxProducer {
  if (typeof options !== 'object' || options === null || !options.client) {
    throw new ConfigError('client', 'an SQSClient is required');
  }
  const { client } = options;
  const urls = new Map<string, Promise<string>>();
  const resolveUrl = (destination: string): Promise<string> => {
    if (options.queueUrl) return Promise.resolve(options.queueUrl(destination));
    if (/^https?:\/\//.test(destination)) return Promise.resolve(destination);
    let url = urls.get(destination);
    if (!url) {
      url = client.send(new GetQueueUrlCommand({ QueueName: destination })).then((out) => {
        if (!out.QueueUrl)
          throw new SqsOperationError('GetQueueUrl', 'Unknown', `no URL for queue ${destination}`);
        return out.QueueUrl;
      });
      url.catch(() => urls.delete(destination));
      urls.set(destination, url);
    }
    return url;
  };

  return {
    async send(messages: readonly OutboxMessage[]): Promise<OutboxSendResult[]> {
      const results: OutboxSendResult[] = new Array(messages.length);
      const byQueue = new Map<string, number[]>();
      await Promise.all(
        messages.map(async (message, index) => {
          try {
            const url = await resolveUrl(message.destination);
            const list = byQueue.get(url) ?? [];
            list.push(index);
            byQueue.set(url, list);
          } catch (error) {
            // Retried: the queue may be created later (the relay dead-letters after maxAttempts).
            results[index] = { ok: false, error };
          }
        }),
      );
      await Promise.all(
        [...byQueue].map(async ([queueUrl, indexes]) => {
          for (let start = 0; start < indexes.length; start += MAX_BATCH) {
            await sendBatch(client, queueUrl, messages, indexes.slice(start, start + MAX_BATCH), results);
          }
        }),
      );
      return results;
    },
  };
}

async function sendBatch(
  client: SQSClient,
  queueUrl: string,
  messages: readonly OutboxMessage[],
  indexes: number[],
  results: OutboxSendResult[],
): Promise<void> {
  const entries: SendMessageBatchRequestEntry[] = [];
  for (const [n, index] of indexes.entries()) {
    const message = messages[index]!;
    try {
      const fifo = queueUrl.endsWith('.fifo');
      const input = toSendInput({
        queueUrl,
        id: message.id,
        body: new TextDecoder('utf-8', { fatal: true }).decode(message.body),
        attributes: message.attributes,
        ...(fifo ? { groupId: message.key } : {}),
      });
      entries.push({
        Id: String(n),
        MessageBody: input.MessageBody,
        MessageAttributes: input.MessageAttributes,
        ...(input.MessageGroupId !== undefined ? { MessageGroupId: input.MessageGroupId } : {}),
        ...(input.MessageDeduplicationId !== undefined
          ? { MessageDeduplicationId: input.MessageDeduplicationId }
          : {}),
      });
    } catch (error) {
      // A body SQS cannot carry (not UTF-8), a FIFO row without a key, too many attributes.
      results[index] = { ok: false, error, permanent: true };
    }
  }
  // Packed by bytes before sending (SQS refuses the whole call past its limit), and a
  // call refused as too long anyway is split in halves: a row is never failed for the
  // size of the others it was batched with.
  let chunk: SendMessageBatchRequestEntry[] = [];
  let bytes = 0;
  for (const entry of entries) {
    const size = entrySize(entry);
    if (chunk.length > 0 && bytes + size > MAX_BATCH_BYTES) {
      await sendEntries(client, queueUrl, chunk, indexes, results);
      chunk = [];
      bytes = 0;
    }
    chunk.push(entry);
    bytes += size;
  }
  if (chunk.length > 0) await sendEntries(client, queueUrl, chunk, indexes, results);
  for (const index of indexes) {
    results[index] ??= { ok: false, error: new Error('SQS answered nothing for this entry') };
  }
}

async function sendEntries(
  client: SQSClient,
  queueUrl: string,
  entries: SendMessageBatchRequestEntry[],
  indexes: number[],
  results: OutboxSendResult[],
): Promise<void> {
  try {
    const out = await client.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
    for (const ok of out.Successful ?? []) results[indexes[Number(ok.Id)]!] = { ok: true };
    for (const failed of out.Failed ?? []) {
      const error = new SqsOperationError(
        'SendMessageBatch',
        failed.Code ?? 'Unknown',
        failed.Message ?? 'refused',
      );
      results[indexes[Number(failed.Id)]!] = { ok: false, error, permanent: failed.SenderFault === true };
    }
  } catch (error) {
    const code = sqsErrorCode(error) ?? 'Unknown';
    if (code.endsWith('BatchRequestTooLong') && entries.length > 1) {
      const half = Math.ceil(entries.length / 2);
      await sendEntries(client, queueUrl, entries.slice(0, half), indexes, results);
      await sendEntries(client, queueUrl, entries.slice(half), indexes, results);
      return;
    }
    const wrapped = new SqsOperationError(
      'SendMessageBatch',
      code,
      error instanceof Error ? error.message : String(error),
      { cause: error },
    );
    // One entry too long alone is too long for good.
    const permanent = code.endsWith('BatchRequestTooLong');
    for (const entry of entries)
      results[indexes[Number(entry.Id)]!] = permanent
        ? { ok: false, error: wrapped, permanent }
        : { ok: false, error: wrapped };
  }
}

/** What an entry counts toward the batch limit: its body and its attributes' names, types and values. */
function entrySize(entry: SendMessageBatchRequestEntry): number {
  let size = Buffer.byteLength(entry.MessageBody ?? '', 'utf8');
  for (const [name, value] of Object.entries(entry.MessageAttributes ?? {})) {
    size += Buffer.byteLength(name, 'utf8') + Buffer.byteLength(value.DataType ?? '', 'utf8');
    size += Buffer.byteLength(value.StringValue ?? '', 'utf8') + (value.BinaryValue?.byteLength ?? 0);
  }
  return size;
}
