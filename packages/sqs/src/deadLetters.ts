import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageCommand,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
  type Message as SqsMessage,
} from '@aws-sdk/client-sqs';
import {
  BrokerMisconfiguredError,
  type ConsumerConfig,
  type DeadLetterSession,
  type HeldDeadLetter,
} from '@oncely/core';
import {
  DEAD_LETTER_ATTRIBUTES,
  DEDUPLICATION_ID_ATTRIBUTE,
  originalAttributes,
} from './deadLetterAttributes.js';
import { SqsQueueClient } from './SqsQueueClient.js';
import { parseSqsConfig } from './sqsConfig.js';

/**
 * How long a session hides the dead letters it read. `close()` gives them back at once;
 * a session that dies leaves them hidden this long. A session that runs longer sees its
 * first copies come back (and a second `read` would list them twice): keep passes short.
 */
export const DEAD_LETTER_SESSION_VISIBILITY_SECONDS = 120;

/**
 * A request of a session's own client that has no answer after this long fails (a dead or
 * silent connection): reads wait at most 1 s on SQS, sends and deletes none.
 */
const REQUEST_TIMEOUT_MS = 15_000;

/**
 * How long `close()` tries to give the letters back: past it, it fails and they come back
 * after {@link DEAD_LETTER_SESSION_VISIBILITY_SECONDS} instead, so a silent connection
 * cannot hang `oncely dlq` as it finishes.
 */
export const DEAD_LETTER_CLOSE_TIMEOUT_MS = 10_000;

interface SqsHeld extends HeldDeadLetter {
  readonly message: SqsMessage;
}

/** Epoch ms by which a copy not given back is visible again (its receive's visibility timeout). */
type HiddenUntil = number;

/**
 * Opens a pass over the consumer's dead-letter queue (`broker.deadLetterQueueUrl`, else
 * the target of the queue's RedrivePolicy) for `DeadLetters` / `oncely dlq`.
 *
 * Strategy: `read()` receives until the queue answers empty (a last 1-second long poll,
 * since a short poll samples only some SQS servers), hiding each copy for
 * {@link DEAD_LETTER_SESSION_VISIBILITY_SECONDS}; `replay` sends the body and the original
 * attributes (its `message-id` included, without Oncely's dead-letter attributes) to the
 * source queue and deletes the copy once SQS accepted the send; `remove` deletes it;
 * `close()` makes what is left visible again (ChangeMessageVisibility 0). A FIFO source
 * gets the copy's group and, as deduplication ID, the dead-letter copy's MessageId: a
 * replay re-run within 5 minutes after a crash between send and delete is dropped by SQS;
 * the original deduplication ID travels in `oncely-deduplication-id`, which the consumer
 * reads first (`idStrategy: 'deduplication-id'` sees it again).
 * SQS keeps no order in a standard queue, so the listing's order is SQS's.
 *
 * @example
 * ```ts
 * const session = await openDeadLetters({ name: 'payments', broker: { type: 'sqs', queueUrl, deadLetterQueueUrl }, store, handler });
 * ```
 */
export async function openDeadLetters(config: ConsumerConfig<any, any>): Promise<DeadLetterSession> {
  const settings = parseSqsConfig(config.broker as unknown as Record<string, unknown>);
  const owned = settings.client === undefined;
  const client =
    settings.client ??
    new SQSClient({
      endpoint: settings.endpoint,
      region: settings.region,
      credentials: settings.credentials,
      // Without throwOnRequestTimeout the SDK only warns when the timeout passes and waits
      // on, for its 15-minute socket timeout, then retries.
      requestHandler: {
        requestTimeout: REQUEST_TIMEOUT_MS,
        connectionTimeout: 10_000,
        throwOnRequestTimeout: true,
      },
    });
  try {
    const queue = new SqsQueueClient(client, settings.queueUrl);
    const facts = await queue.facts();
    let dlqUrl = settings.deadLetterQueueUrl;
    if (dlqUrl === undefined && facts.redrive)
      dlqUrl = await queue.urlOfArn(facts.redrive.deadLetterTargetArn);
    if (dlqUrl === undefined) {
      throw new BrokerMisconfiguredError(
        `${settings.queueUrl} has no dead-letter queue (no broker.deadLetterQueueUrl, no RedrivePolicy)`,
      );
    }
    await queue.facts(dlqUrl);
    return new SqsDeadLetterSession(client, owned, settings.queueUrl, dlqUrl, facts.fifo);
  } catch (error) {
    if (owned) client.destroy();
    throw error;
  }
}

class SqsDeadLetterSession implements DeadLetterSession {
  readonly defaultIdStrategy = { attribute: 'message-id' };
  /** What was read and not removed, by receipt handle: close() gives these back. */
  private readonly held = new Map<string, HiddenUntil>();

  constructor(
    private readonly client: SQSClient,
    private readonly ownsClient: boolean,
    private readonly queueUrl: string,
    private readonly dlqUrl: string,
    private readonly fifo: boolean,
  ) {}

  get name(): string {
    return this.dlqUrl;
  }

  async read(): Promise<HeldDeadLetter[]> {
    const letters: SqsHeld[] = [];
    for (let waitSeconds = 0; ; ) {
      // Before the call: the timeout runs from SQS's receive, never before this.
      const hiddenUntil = Date.now() + DEAD_LETTER_SESSION_VISIBILITY_SECONDS * 1000;
      const out = await this.client.send(
        new ReceiveMessageCommand({
          QueueUrl: this.dlqUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: waitSeconds,
          VisibilityTimeout: DEAD_LETTER_SESSION_VISIBILITY_SECONDS,
          MessageAttributeNames: ['All'],
          MessageSystemAttributeNames: ['All'],
        }),
      );
      const messages = out.Messages ?? [];
      if (messages.length === 0) {
        if (waitSeconds > 0) return letters;
        waitSeconds = 1;
        continue;
      }
      waitSeconds = 0;
      for (const message of messages) {
        this.held.set(message.ReceiptHandle!, hiddenUntil);
        letters.push(describe(message));
      }
    }
  }

  async replay(letter: HeldDeadLetter): Promise<void> {
    const { message } = letter as SqsHeld;
    const attributes = originalAttributes(message);
    for (const name of Object.values(DEAD_LETTER_ATTRIBUTES)) delete attributes[name];
    await this.client.send(
      new SendMessageCommand({
        QueueUrl: this.queueUrl,
        MessageBody: message.Body ?? '',
        MessageAttributes: attributes as Record<string, MessageAttributeValue>,
        ...(this.fifo
          ? {
              MessageGroupId: message.Attributes?.MessageGroupId ?? 'oncely-replay',
              MessageDeduplicationId: message.MessageId,
            }
          : {}),
      }),
    );
    // Only now: SQS has the copy in the source queue.
    await this.remove(letter);
  }

  async remove(letter: HeldDeadLetter): Promise<void> {
    const { message } = letter as SqsHeld;
    await this.client.send(
      new DeleteMessageCommand({ QueueUrl: this.dlqUrl, ReceiptHandle: message.ReceiptHandle }),
    );
    this.held.delete(message.ReceiptHandle!);
  }

  /**
   * Gives back every copy read and not removed. Every batch is tried; a copy SQS refused
   * (an entry in the answer's `Failed`, or a batch call that failed) stays hidden until its
   * visibility timeout runs out, and close() then rejects saying how many and until when,
   * so the operator does not take the queue for emptier than it is.
   */
  async close(): Promise<void> {
    const refused: Array<{ hiddenUntil: HiddenUntil; why: string }> = [];
    const total = this.held.size;
    // Bounded as a whole (the caller's own client may have no timeout, and the SDK retries):
    // past it, the batches left fail at once and are reported with the others.
    const abortSignal = AbortSignal.timeout(DEAD_LETTER_CLOSE_TIMEOUT_MS);
    try {
      const handles = [...this.held.entries()];
      for (let i = 0; i < handles.length; i += 10) {
        const batch = handles.slice(i, i + 10);
        try {
          const out = await this.client.send(
            new ChangeMessageVisibilityBatchCommand({
              QueueUrl: this.dlqUrl,
              Entries: batch.map(([handle], n) => ({
                Id: String(n),
                ReceiptHandle: handle,
                VisibilityTimeout: 0,
              })),
            }),
            { abortSignal },
          );
          for (const failure of out.Failed ?? []) {
            const entry = batch[Number(failure.Id)];
            if (entry)
              refused.push({ hiddenUntil: entry[1], why: `${failure.Code}: ${failure.Message ?? ''}` });
          }
        } catch (error) {
          const why = abortSignal.aborted
            ? `no answer within ${DEAD_LETTER_CLOSE_TIMEOUT_MS} ms`
            : error instanceof Error
              ? `${error.name}: ${error.message}`
              : String(error);
          for (const [, hiddenUntil] of batch) refused.push({ hiddenUntil, why });
        }
      }
      this.held.clear();
    } finally {
      if (this.ownsClient) this.client.destroy();
    }
    if (refused.length > 0) {
      const until = new Date(Math.max(...refused.map((r) => r.hiddenUntil))).toISOString();
      throw new Error(
        `could not give back ${refused.length} of ${total} dead letters to ${this.dlqUrl} ` +
          `(${refused[0]!.why}): they stay hidden until their ${DEAD_LETTER_SESSION_VISIBILITY_SECONDS} s ` +
          `visibility timeout runs out and are back by ${until}; nothing is lost`,
      );
    }
  }
}

function describe(message: SqsMessage): SqsHeld {
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    if (value.StringValue !== undefined) attributes[name] = value.StringValue;
  }
  const reason = attributes[DEAD_LETTER_ATTRIBUTES.reason];
  const error = attributes[DEAD_LETTER_ATTRIBUTES.detail];
  // The original's broker ID (a replay gets a new one: the 'broker' ID strategy cannot dedup it).
  const sourceId = attributes[DEAD_LETTER_ATTRIBUTES.sourceMessageId] ?? message.MessageId;
  for (const name of Object.values(DEAD_LETTER_ATTRIBUTES)) delete attributes[name];
  const sent = Number(message.Attributes?.SentTimestamp);
  const deduplicationId = attributes[DEDUPLICATION_ID_ATTRIBUTE];
  return {
    message,
    envelope: {
      body: message.Body ?? '',
      attributes,
      ...(sourceId ? { brokerMessageId: sourceId } : {}),
      // The original's (the copy's own is the source MessageId): what the consumer will see.
      ...(deduplicationId ? { deduplicationId } : {}),
    },
    // Without Oncely's attribute it came through SQS's own redrive (maxReceiveCount).
    reason: reason ?? 'broker-redrive',
    ...(error !== undefined ? { error } : {}),
    ...(Number.isFinite(sent) && sent > 0 ? { lastFailedAt: new Date(sent) } : {}),
  };
}
